#!/usr/bin/env bash
# The built-in CPU demo, into outputs/demo/: for each built-in policy, arithmetic data -> oracle V -> trace of
# covariance -> the Assumption-2 diagnostic; then Figure 4 with both. The paper-regime policy (assets/paper_policy:
# a lead-in of random words before the answer, and errors that are sampled slips of moderate probability, like an
# LLM's) and the tiny policy (assets/tiny_policy, a few confident digits: the counter-example where the paper's
# Assumption 2 fails) run side by side, one core each.
# Usage: bash scripts/demo.sh
# Settings (environment): DEMO_OUT (output folder, outputs/demo; replaced only if a demo made it; the committed run is
# results/demo, regenerated with DEMO_OUT=results/demo DEMO_OVERWRITE=1), DEMO_MODEL (hub id or folder; default
# assets/tiny_policy, built when missing), DEMO_INSTALL (1: pip install -r requirements.txt first),
# DEMO_T (prompts, 192), DEMO_N_ORACLE (samples per prompt for V, 256), DEMO_M (groups, 8), DEMO_K_LIST ("2 4 8 16"),
# DEMO_LABEL (its panel's title when DEMO_PAPER=0);
# the paper-regime part (into DEMO_OUT/paper_regime/): DEMO_PAPER (1: run it, 0: skip), DEMO_PAPER_MODEL (default
# assets/paper_policy, built when missing), DEMO_PAPER_T (24), DEMO_PAPER_N_ORACLE (64), DEMO_PAPER_M (6),
# DEMO_PAPER_K_LIST ("4 8 16").
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
LABEL=${DEMO_LABEL:-built-in policy (zero-shot)}
PAPER=${DEMO_PAPER:-1}
PAPER_MODEL=${DEMO_PAPER_MODEL:-assets/paper_policy}
PAPER_T=${DEMO_PAPER_T:-24}
PAPER_N_ORACLE=${DEMO_PAPER_N_ORACLE:-64}
PAPER_EXPLAIN_N=48  # samples per prompt of its Assumption-2 diagnostic (the tiny policy: 96)
PAPER_M=${DEMO_PAPER_M:-6}  # the most groups that keep this part within the tiny part it runs beside
PAPER_K_LIST=${DEMO_PAPER_K_LIST:-4 8 16}
need_int DEMO_T "$T" 1
need_int DEMO_N_ORACLE "$N_ORACLE" 1
need_int DEMO_M "$M" 2
for k in $K_LIST; do need_int DEMO_K_LIST "$k" 2; done
[ -n "$(echo $K_LIST)" ] || fail "DEMO_K_LIST is empty"
[ "$PAPER" = "0" ] || [ "$PAPER" = "1" ] || fail "DEMO_PAPER must be 0 or 1"
need_int DEMO_PAPER_T "$PAPER_T" 1
need_int DEMO_PAPER_N_ORACLE "$PAPER_N_ORACLE" 1
need_int DEMO_PAPER_M "$PAPER_M" 2
for k in $PAPER_K_LIST; do need_int DEMO_PAPER_K_LIST "$k" 2; done
[ -n "$(echo $PAPER_K_LIST)" ] || fail "DEMO_PAPER_K_LIST is empty"
[ -z "${DEMO_PAPER_MODEL:-}" ] || need_model DEMO_PAPER_MODEL "$PAPER_MODEL"
[ "${DEMO_INSTALL:-1}" = "0" ] || [ "${DEMO_INSTALL:-1}" = "1" ] || fail "DEMO_INSTALL must be 0 or 1"
[ "${DEMO_OVERWRITE:-0}" = "0" ] || [ "${DEMO_OVERWRITE:-0}" = "1" ] || fail "DEMO_OVERWRITE must be 0 or 1"
[ -z "${DEMO_MODEL:-}" ] || need_model DEMO_MODEL "$MODEL"
check_output "$OUT" DEMO_OUT  # before any install or data step
if [ "${DEMO_INSTALL:-1}" = "1" ]; then
  python -m pip install --quiet --disable-pip-version-check -r requirements.txt
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # the tiny model runs faster on one thread
start=$(date +%s)
if [ -z "${DEMO_MODEL:-}" ] && [ ! -f "$MODEL/config.json" ]; then  # only the built-in policies are built here
  python scripts/build_tiny_policy.py --out_dir "$MODEL"
fi
if [ "$PAPER" = 1 ] && [ -z "${DEMO_PAPER_MODEL:-}" ] && [ ! -f "$PAPER_MODEL/config.json" ]; then
  python scripts/build_paper_policy.py --out_dir "$PAPER_MODEL"
fi
python scripts/make_arithmetic_data.py --out_dir data
FINAL=$OUT
stage_output "$FINAL" OUT

# run_policy DIR MODEL T N_ORACLE M "K_LIST" EXPLAIN_N: oracle table, trace of covariance, Assumption-2 diagnostic
# (10 prompts x EXPLAIN_N samples); prints the CPU time of its steps
run_policy() {
  local dir=$1 model=$2 t=$3 n_oracle=$4 m=$5 k_list=$6 explain_n=$7
  local TIMEFORMAT="$dir: %U s user + %S s system CPU time (%R s wall)"
  mkdir -p "$dir"
  time {
    python Gradient_evaluation/calculate_oracle_v.py --model "$model" --dataset data/arithmetic_zero_shot.jsonl \
      --device cpu --dtype fp32 --limit "$t" --n_oracle "$n_oracle" --batch_size 256 --out_dir "$dir"
    python Gradient_evaluation/run_tracecov.py --model "$model" --oracle_table "$dir"/oracle_v_n*.jsonl \
      --device cpu --dtype fp32 --T "$t" --M "$m" --K_list $k_list --gen_bs 256 --save_json "$dir" --plot_path "$dir"
    python scripts/explain_baseline.py --model "$model" --oracle_table "$dir"/oracle_v_n*.jsonl --prompts 10 \
      --n "$explain_n" --out "$dir"/baseline_diagnostic.json
  }
}

# The two policies run at the same time, one core each (each run is single-threaded: same numbers either way).
if [ "$PAPER" = 1 ]; then
  run_policy "$OUT/paper_regime" "$PAPER_MODEL" "$PAPER_T" "$PAPER_N_ORACLE" "$PAPER_M" "$PAPER_K_LIST" "$PAPER_EXPLAIN_N" \
    > "$OUT/paper_regime.log" 2>&1 &
  paper_job=$!
fi
run_policy "$OUT" "$MODEL" "$T" "$N_ORACLE" "$M" "$K_LIST" 96
if [ "$PAPER" = 1 ]; then
  wait "$paper_job" || { cat "$OUT/paper_regime.log" >&2; fail "the paper-regime part failed (log above)"; }
  cat "$OUT/paper_regime.log"
  rm "$OUT/paper_regime.log"
  python plots/make_figures.py --tracecov "$OUT"/paper_regime/tracecov_*[0-9].json "$OUT"/tracecov_*[0-9].json \
    --labels "paper_policy: the paper's regime" "tiny_policy: the counter-example" \
    --out_dir "$OUT" --name figure4
  python scripts/compare_baseline.py --diagnostics "$OUT"/paper_regime/baseline_diagnostic.json \
    "$OUT"/baseline_diagnostic.json --labels "paper regime" "tiny policy" --out "$OUT"/assumption2.md
else
  python plots/make_figures.py --tracecov "$OUT"/tracecov_*[0-9].json --labels "$LABEL" --out_dir "$OUT" --name figure4
fi
python plots/make_figures.py --advisor "$OUT"/tracecov_*[0-9].json --out_dir "$OUT"
publish_output "$OUT" "$FINAL"
echo "demo finished in $(( $(date +%s) - start )) s; outputs in $FINAL/"
