#!/usr/bin/env bash
# Exact theory against Monte Carlo on the built-in policy with ONE generated token (top_p 1), on CPU:
#   exact oracle table + exact curves -> run_tracecov.py (all five estimators) -> overlay figure -> estimator table.
# Usage: bash scripts/theory_demo.sh     (about 2 minutes on one thread)
# Settings (environment): THEORY_OUT (outputs/theory), THEORY_TABLE_OUT (estimator table folder, outputs/estimators),
# THEORY_MODEL (assets/tiny_policy), THEORY_T (prompts, 16), THEORY_M (groups per prompt, 64), THEORY_K_LIST
# (Monte Carlo K, "2 4 8 16"). Both folders are replaced only if a demo made them, through staging folders moved into
# place when every step succeeded; the committed runs (results/theory, results/estimators) are regenerated with
# THEORY_OUT=results/theory THEORY_TABLE_OUT=results/estimators DEMO_OVERWRITE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_guard.sh
no_arguments "$0" 9 "$@"
OUT=${THEORY_OUT:-outputs/theory}
TABLE_OUT=${THEORY_TABLE_OUT:-outputs/estimators}
MODEL=${THEORY_MODEL:-assets/tiny_policy}
T=${THEORY_T:-16}
M=${THEORY_M:-64}
K_LIST=${THEORY_K_LIST:-2 4 8 16}
need_int THEORY_T "$T" 1
need_int THEORY_M "$M" 2
[ -n "$(echo $K_LIST)" ] || fail "THEORY_K_LIST is empty"
for k in $K_LIST; do need_int THEORY_K_LIST "$k" 2; done
[ "${DEMO_OVERWRITE:-0}" = "0" ] || [ "${DEMO_OVERWRITE:-0}" = "1" ] || fail "DEMO_OVERWRITE must be 0 or 1"
need_model THEORY_MODEL "$MODEL"
check_output "$OUT" THEORY_OUT
check_output "$TABLE_OUT" THEORY_TABLE_OUT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
start=$(date +%s)
FINAL_OUT=$OUT FINAL_TABLE_OUT=$TABLE_OUT
stage_output "$FINAL_OUT" OUT
stage_output "$FINAL_TABLE_OUT" TABLE_OUT
# 1. exact: the first T zero-shot rows whose answer one token can produce (a single digit; others have V = 0)
python scripts/exact_theory.py --model "$MODEL" --dataset data/arithmetic_zero_shot.jsonl --T "$T" --reachable_only \
  --temperature 1.0 --K_list 2 3 4 5 6 8 10 12 16 --out_dir "$OUT"
# 2. Monte Carlo on the same prompts, one token, top_p 1, the exact V as oracle baseline; c1 in batches of 4 prompts
python Gradient_evaluation/run_tracecov.py --model "$MODEL" --oracle_table "$OUT"/oracle_exact_*.jsonl \
  --device cpu --dtype fp32 --T "$T" --M "$M" --K_list $K_LIST \
  --temperature 1.0 --top_p 1 --max_new_tokens 1 --gen_bs 256 --c1_batch 4 \
  --estimators naive grpo oracleV grpo_std drgrpo --save_json "$OUT" --skip_plot
# 3. the figure: Monte Carlo points with 95% intervals, exact curves dashed
python plots/make_figures.py --tracecov "$OUT"/tracecov_*[0-9].json --theory "$OUT"/theory_*.json \
  --labels "built-in policy, one token (T=$T)" --out_dir "$OUT" --name theory_vs_mc
# 4. the estimator table (exact vs Monte Carlo tr Cov, bias^2, MSE) and the advisor's constants vs exact
python scripts/estimator_table.py --theory "$OUT"/theory_*.json --tracecov "$OUT"/tracecov_*[0-9].json \
  --out_dir "$TABLE_OUT"
publish_output "$OUT" "$FINAL_OUT"
publish_output "$TABLE_OUT" "$FINAL_TABLE_OUT"
echo "theory demo finished in $(( $(date +%s) - start )) s; outputs in $FINAL_OUT/ and $FINAL_TABLE_OUT/"
