#!/usr/bin/env bash
# The built-in CPU demo: arithmetic data -> oracle V -> trace of covariance -> Figure 4, into outputs/demo/.
# Usage: bash scripts/demo.sh
# Settings (environment): DEMO_OUT (output folder, outputs/demo; replaced only if a demo made it; the committed run is
# results/demo, regenerated with DEMO_OUT=results/demo DEMO_OVERWRITE=1), DEMO_MODEL (hub id or folder; default
# assets/tiny_policy, built when missing), DEMO_INSTALL (1: pip install -r requirements.txt first),
# DEMO_T (prompts, 192), DEMO_N_ORACLE (samples per prompt for V, 256), DEMO_M (groups, 8), DEMO_K_LIST ("2 4 8 16").
# Every setting is checked before anything is written; the outputs are written to a staging folder beside
# DEMO_OUT and moved into place only when every step succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_guard.sh
no_arguments "$0" 10 "$@"
OUT=${DEMO_OUT:-outputs/demo}
MODEL=${DEMO_MODEL:-assets/tiny_policy}
T=${DEMO_T:-192}
N_ORACLE=${DEMO_N_ORACLE:-256}
M=${DEMO_M:-8}
K_LIST=${DEMO_K_LIST:-2 4 8 16}
need_int DEMO_T "$T" 1
need_int DEMO_N_ORACLE "$N_ORACLE" 1
need_int DEMO_M "$M" 2
for k in $K_LIST; do need_int DEMO_K_LIST "$k" 2; done
[ -n "$(echo $K_LIST)" ] || fail "DEMO_K_LIST is empty"
[ "${DEMO_INSTALL:-1}" = "0" ] || [ "${DEMO_INSTALL:-1}" = "1" ] || fail "DEMO_INSTALL must be 0 or 1"
[ "${DEMO_OVERWRITE:-0}" = "0" ] || [ "${DEMO_OVERWRITE:-0}" = "1" ] || fail "DEMO_OVERWRITE must be 0 or 1"
[ -z "${DEMO_MODEL:-}" ] || need_model DEMO_MODEL "$MODEL"
check_output "$OUT" DEMO_OUT  # before any install or data step
if [ "${DEMO_INSTALL:-1}" = "1" ]; then
  python -m pip install --quiet --disable-pip-version-check -r requirements.txt
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # the tiny model runs faster on one thread
start=$(date +%s)
if [ -z "${DEMO_MODEL:-}" ] && [ ! -f "$MODEL/config.json" ]; then  # only the built-in policy is built here
  python scripts/build_tiny_policy.py --out_dir "$MODEL"
fi
python scripts/make_arithmetic_data.py --out_dir data
FINAL=$OUT
stage_output "$FINAL" OUT
python Gradient_evaluation/calculate_oracle_v.py --model "$MODEL" --dataset data/arithmetic_zero_shot.jsonl \
  --device cpu --dtype fp32 --limit "$T" --n_oracle "$N_ORACLE" --batch_size 256 --out_dir "$OUT"
python Gradient_evaluation/run_tracecov.py --model "$MODEL" --oracle_table "$OUT"/oracle_v_n*.jsonl \
  --device cpu --dtype fp32 --T "$T" --M "$M" --K_list $K_LIST --gen_bs 256 --save_json "$OUT" --plot_path "$OUT"
python plots/make_figures.py --tracecov "$OUT"/tracecov_*[0-9].json --labels "built-in policy (zero-shot)" \
  --out_dir "$OUT" --name figure4
python plots/make_figures.py --advisor "$OUT"/tracecov_*[0-9].json --out_dir "$OUT"
python scripts/explain_baseline.py --oracle_table "$OUT"/oracle_v_n*.jsonl --prompts 10 --n 96 \
  --out "$OUT"/baseline_diagnostic.json
publish_output "$OUT" "$FINAL"
echo "demo finished in $(( $(date +%s) - start )) s; outputs in $FINAL/"
