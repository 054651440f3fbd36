#!/usr/bin/env bash
# Regenerate k_validation advisor runs on their original inputs (first 48 held-out rows of the setting's kinds,
# seed 0) with the current code; adds std-GRPO's measured curve. Settings as arguments (default: the two swept
# ones, train_mixed train_mixed_t1.5); POLICY_KINDS[_tTEMP] as in scripts/k_validation.sh. Outputs in
# outputs/regen (W); the committed copies (main JSON, per-prompt CSV, log) and the predictions
# (k_validation predict) are in results/k_validation/regenerated/.
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
export PYTHONPATH=$PWD OMP_NUM_THREADS=1
PY="nice -n 10 python"
W=outputs/regen
PATTERN='^(train|tiny)_(mixed|division|nodivision)(_t([0-9]*\.?[0-9]+))?$'
settings=("$@"); (( $# )) || settings=(train_mixed train_mixed_t1.5)
for s in "${settings[@]}"; do  # every setting checked before any work
  [[ $s =~ $PATTERN ]] || { echo "error: setting '$s': use (train|tiny)_(mixed|division|nodivision)[_tTEMP]" >&2; exit 2; }
done
[[ -d $W/data_all ]] || $PY Policy_Optimization/prepare_data.py --source arithmetic --n_train 8192 --n_test 2000 --out_dir $W/data_all
for s in "${settings[@]}"; do
  [[ $s =~ $PATTERN ]]
  model=assets/${BASH_REMATCH[1]}_policy; kinds=${BASH_REMATCH[2]}; t=${BASH_REMATCH[4]:-1.0}; out=$W/advisor_$s
  [[ -d $W/data_$kinds ]] || $PY scripts/k_validation.py subset $W/data_all $W/data_$kinds --kinds $kinds --n_test 200
  mkdir -p $out
  start=$(date +%s)
  ls $out/oracle_v_n*.jsonl >/dev/null 2>&1 || $PY Gradient_evaluation/calculate_oracle_v.py --model $model --dataset $W/data_$kinds/test.parquet \
    --device cpu --dtype fp32 --limit 48 --n_oracle 256 --batch_size 256 --temperature $t --top_p 1.0 --max_new_tokens 16 --out_dir $out
  $PY Gradient_evaluation/run_tracecov.py --model $model --oracle_table $out/oracle_v_n*.jsonl \
    --device cpu --dtype fp32 --T 48 --M 8 --K_list 2 4 8 16 --temperature $t --top_p 1.0 --max_new_tokens 16 --gen_bs 256 \
    --save_json $out --skip_plot --budget 128 --allowed_K 2 4 8 16 --estimators naive grpo oracleV grpo_std \
    --advisor_estimator grpo_std > $out/run_tracecov.log 2>$out/run_tracecov.err
  echo "$s: $(( $(date +%s) - start )) s"
done
