#!/usr/bin/env bash
# item 5: the advisor at the start, middle (step 6) and end (step 12) of one train_mixed run (K = 8, seed 200)
set -euo pipefail
cd /work/wt/kval
export PYTHONPATH=$PWD TRAINER=trl WANDB_MODE=offline LR=1e-5 TEST_FREQ=3 MAX_RESPONSE_LENGTH=16 SAVE_MODEL=1 \
       LOGGERS="[console]" OMP_NUM_THREADS=1 DRY_RUN=0 MODEL=assets/train_policy
W=outputs/k_validation/drift
mkdir -p $W
for steps in 6 12; do
  DATA_DIR=outputs/k_validation/data_mixed BASE=$W/s$steps RUN_TAG=drift setsid python Policy_Optimization/sweep_group_size.py \
    --K_list 8 --seeds 200 --budget 128 --run_tag drift -- --max_steps $steps --threads 1 > $W/train_s$steps.log 2>&1 &
done
wait
for steps in 6 12; do
  ck=$(dirname $(find $W/s$steps/checkpoints -name config.json | head -1))
  out=$W/advisor_s$steps; mkdir -p $out
  ( python Gradient_evaluation/calculate_oracle_v.py --model $ck --dataset outputs/k_validation/data_mixed/test.parquet \
      --device cpu --dtype fp32 --limit 48 --n_oracle 256 --batch_size 256 --temperature 1.0 --top_p 1.0 --max_new_tokens 16 --out_dir $out > $out/oracle.log 2>&1
    python Gradient_evaluation/run_tracecov.py --model $ck --oracle_table $out/oracle_v_n*.jsonl --device cpu --dtype fp32 --T 48 --M 8 \
      --K_list 2 4 8 16 --temperature 1.0 --top_p 1.0 --max_new_tokens 16 --gen_bs 256 --save_json $out --skip_plot --budget 128 \
      --allowed_K 2 4 8 16 > $out/run_tracecov.log ) &
done
wait
echo drift done
