#!/usr/bin/env bash
# The built-in CPU demo: arithmetic data -> oracle V -> trace of covariance -> Figure 4, into results/demo/.
# Usage: bash scripts/demo.sh            (DEMO_INSTALL=0 skips the pip install step)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/demo}
MODEL=${MODEL:-assets/tiny_policy}
if [ "${DEMO_INSTALL:-1}" = "1" ]; then
  python -m pip install --quiet --disable-pip-version-check -r requirements.txt
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # the tiny model runs faster on one thread
start=$(date +%s)
[ -f "$MODEL/config.json" ] || python scripts/build_tiny_policy.py --out_dir "$MODEL"
python scripts/make_arithmetic_data.py --out_dir data
rm -rf "$OUT" && mkdir -p "$OUT"
python Gradient_evaluation/calculate_oracle_v.py --model "$MODEL" --dataset data/arithmetic_zero_shot.jsonl \
  --device cpu --dtype fp32 --limit "${DEMO_T:-192}" --n_oracle "${DEMO_N_ORACLE:-256}" --batch_size 256 \
  --out_dir "$OUT"
python Gradient_evaluation/run_tracecov.py --model "$MODEL" --oracle_table "$OUT"/oracle_v_n*.jsonl \
  --device cpu --dtype fp32 --T "${DEMO_T:-192}" --M "${DEMO_M:-8}" --K_list ${DEMO_K_LIST:-2 4 8 16} \
  --gen_bs 256 --save_json "$OUT" --plot_path "$OUT"
python plots/make_figures.py --tracecov "$OUT"/tracecov_*[0-9].json --labels "built-in policy (zero-shot)" \
  --out_dir "$OUT" --name figure4
python plots/make_figures.py --advisor "$OUT"/tracecov_*[0-9].json --budget 64 --out_dir "$OUT"
python scripts/explain_baseline.py --oracle_table "$OUT"/oracle_v_n*.jsonl --prompts 10 --n 96 \
  --out "$OUT"/baseline_diagnostic.json
echo "demo finished in $(( $(date +%s) - start )) s; outputs in $OUT/"
