#!/usr/bin/env bash
# Figure 5 and Table 2 from real GRPO runs on a laptop: the training-demo policy, TRL on CPU.
#
#   bash scripts/train_demo.sh            # data -> sweep K x seeds at a fixed budget -> collect -> figure + tables
#
# Every step uses the project's own tools: Policy_Optimization/prepare_data.py, sweep_group_size.py
# (one TRAINER=trl grpo_train.sh run per K and seed), collect_runs.py, plots/make_figures.py, and
# python -m studies.train_demo_summary. Settings (environment, DEMO_ prefix):
#   DEMO_MODEL (assets/train_policy; an HF folder, a GGUF file or a LoRA adapter folder)
#   DEMO_K_LIST ("2 4 8 16 32")  DEMO_SEEDS ("0 1 2")  DEMO_BUDGET (256)
#   DEMO_STEPS (20)  DEMO_LR (3e-5)  DEMO_N_TRAIN (4096)  DEMO_N_TEST (500)  DEMO_MAX_RESPONSE_LENGTH (16)
#   DEMO_TEST_FREQ (5)  DEMO_JOBS (2: runs side by side, one thread each)
#   DEMO_ADVISOR (1: then run_tracecov.py's group-size advisor on the same policy, held-out prompts and
#   sampling settings: DEMO_ADVISOR_T (48) prompts, DEMO_ADVISOR_M (8) groups, oracle V from 256 samples)
#   DEMO_WORK (outputs/training_demo: data, logs, wandb runs)  DEMO_RESULTS (outputs/training_demo_results)
#   DEMO_PYTHON (python: the interpreter of every step, the training runs included)
# Every setting is checked before anything is deleted or written. DEMO_WORK is deleted and rebuilt only if an earlier
# run of this script made it (marker file). The results are written to a staging folder beside DEMO_RESULTS and moved
# into place when every step succeeded; the committed run (results/training_demo) is regenerated only with
# DEMO_RESULTS=results/training_demo DEMO_OVERWRITE=1.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}"
source scripts/demo_guard.sh
die() { fail "train_demo.sh: $*"; }
no_arguments "$0" 18 "$@"
export PYTHONPATH="${REPO}${PYTHONPATH:+:${PYTHONPATH}}"
PY="${DEMO_PYTHON:-python}"
MODEL="${DEMO_MODEL:-assets/train_policy}"
K_LIST="${DEMO_K_LIST:-2 4 8 16 32}"
SEEDS="${DEMO_SEEDS:-0 1 2}"
BUDGET="${DEMO_BUDGET:-256}"
STEPS="${DEMO_STEPS:-20}"
LR="${DEMO_LR:-3e-5}"
N_TRAIN="${DEMO_N_TRAIN:-4096}"
N_TEST="${DEMO_N_TEST:-500}"
MAX_RESPONSE_LENGTH="${DEMO_MAX_RESPONSE_LENGTH:-16}"
TEST_FREQ="${DEMO_TEST_FREQ:-5}"
JOBS="${DEMO_JOBS:-2}"
ADVISOR="${DEMO_ADVISOR:-1}"
ADVISOR_T="${DEMO_ADVISOR_T:-48}"
ADVISOR_M="${DEMO_ADVISOR_M:-8}"
WORK="${DEMO_WORK:-outputs/training_demo}"
RESULTS="${DEMO_RESULTS:-outputs/training_demo_results}"
MARKER=".made_by_train_demo"

[[ "${ADVISOR}" =~ ^[01]$ ]] || die "DEMO_ADVISOR=${ADVISOR}: use 1 or 0"
for name in BUDGET STEPS N_TRAIN N_TEST MAX_RESPONSE_LENGTH TEST_FREQ JOBS ADVISOR_T ADVISOR_M; do
  [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || die "DEMO_${name}=${!name} must be a positive integer"
done
[[ "${DEMO_OVERWRITE:-0}" =~ ^[01]$ ]] || die "DEMO_OVERWRITE=${DEMO_OVERWRITE}: use 0 or 1"
command -v "${PY}" > /dev/null || die "DEMO_PYTHON=${PY} not found"
[[ -n "${K_LIST// }" ]] || die "DEMO_K_LIST is empty"
for k in ${K_LIST}; do  # each K must fit the budget (the launcher's own check)
  [[ "${k}" =~ ^[1-9][0-9]*$ ]] || die "DEMO_K_LIST: '${k}' is not a positive integer"
  problem="$("${PY}" -m grpo_mse.training.budget "${k}" "${BUDGET}" 2>&1 > /dev/null)" \
    || die "DEMO_K_LIST/DEMO_BUDGET: ${problem#grpo_train.sh: error: }"
done
[[ -n "${SEEDS// }" ]] || die "DEMO_SEEDS is empty"
for seed in ${SEEDS}; do [[ "${seed}" =~ ^[0-9]+$ ]] || die "DEMO_SEEDS: '${seed}' is not a non-negative integer"; done
[[ "${LR}" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] && awk -v x="${LR}" 'BEGIN { exit !(x > 0 && x < 1) }' \
  || die "DEMO_LR=${LR} must be a positive number below 1"
# An HF folder, a GGUF file or a LoRA adapter folder, as every command takes (a GGUF file is converted once here)
problem="$("${PY}" -m grpo_mse.training.model_folder "${MODEL}" 2>&1 > /dev/null)" \
  || die "DEMO_MODEL=${MODEL}: ${problem##*error: }"
if [[ -e "${WORK}" && ! -f "${WORK}/${MARKER}" ]]; then
  die "DEMO_WORK=${WORK} exists and was not made by this script; choose another folder"
fi
check_output "${RESULTS}" DEMO_RESULTS
case "$(realpath -m "${RESULTS}")/" in "$(realpath -m "${WORK}")/"*) die "DEMO_RESULTS must not lie inside DEMO_WORK" ;; esac
rm -rf "${WORK}"
mkdir -p "${WORK}"
touch "${WORK}/${MARKER}"
FINAL_RESULTS="${RESULTS}"
stage_output "${FINAL_RESULTS}" RESULTS
START=$(date +%s)

echo "== data"
"${PY}" Policy_Optimization/prepare_data.py --source arithmetic --n_train "${N_TRAIN}" --n_test "${N_TEST}" \
  --out_dir "${WORK}/data"

echo "== sweep: K in {${K_LIST}} x seeds {${SEEDS}}, ${BUDGET} sequences per step, ${STEPS} steps, lr ${LR}"
export PYTHON_BIN="${PY}" TRAINER=trl MODEL DATA_DIR="${WORK}/data" BASE="${WORK}/runs" WANDB_MODE=offline LR TEST_FREQ \
       MAX_RESPONSE_LENGTH SAVE_MODEL=0 RUN_TAG=demo LOGGERS="[console,wandb]" OMP_NUM_THREADS=1 DRY_RUN=0
pids=()
trap 'kill $(jobs -p) 2> /dev/null; echo "train_demo.sh: interrupted" >&2; exit 130' INT TERM
for seed in ${SEEDS}; do
  for k in ${K_LIST}; do  # one sweep call per run, DEMO_JOBS at a time
    "${PY}" Policy_Optimization/sweep_group_size.py --K_list "${k}" --seeds "${seed}" --budget "${BUDGET}" \
      --run_tag demo -- --max_steps "${STEPS}" --threads 1 > "${WORK}/sweep_K${k}_seed${seed}.log" 2>&1 &
    pids+=($!)
    while (( $(jobs -rp | wc -l) >= JOBS )); do sleep 2; done
  done
done
failed=0
for pid in "${pids[@]}"; do wait "${pid}" || failed=1; done
(( failed == 0 )) || die "a training run failed: see ${WORK}/sweep_K*.log and ${WORK}/runs/logs/"
grep -h "^\[trl\] val-core" "${WORK}"/runs/logs/*.log || true
TRAIN_SECONDS=$(( $(date +%s) - START ))

echo "== collect, Figure 5, Table 2"
"${PY}" Policy_Optimization/collect_runs.py "${WORK}/runs/wandb" --out "${RESULTS}/training_runs.csv"
"${PY}" plots/make_figures.py --training_csv "${RESULTS}/training_runs.csv" --out_dir "${RESULTS}"
"${PY}" -m studies.train_demo_summary "${RESULTS}/training_runs.csv" --out "${RESULTS}/summary.md"
if [[ "${ADVISOR}" == 1 ]]; then
  echo "== group-size advisor: same policy, held-out prompts, temperature 1, top-p 1, ${MAX_RESPONSE_LENGTH} new tokens"
  ADV_START=$(date +%s)
  mkdir -p "${RESULTS}/advisor"
  "${PY}" Gradient_evaluation/calculate_oracle_v.py --model "${MODEL}" --dataset data/arithmetic_zero_shot.jsonl \
    --device cpu --dtype fp32 --limit "${ADVISOR_T}" --n_oracle 256 --batch_size 256 --temperature 1.0 --top_p 1.0 \
    --max_new_tokens "${MAX_RESPONSE_LENGTH}" --out_dir "${RESULTS}/advisor"
  # shellcheck disable=SC2086
  "${PY}" Gradient_evaluation/run_tracecov.py --model "${MODEL}" --oracle_table "${RESULTS}"/advisor/oracle_v_n*.jsonl \
    --device cpu --dtype fp32 --T "${ADVISOR_T}" --M "${ADVISOR_M}" --K_list ${K_LIST} --temperature 1.0 --top_p 1.0 \
    --max_new_tokens "${MAX_RESPONSE_LENGTH}" --gen_bs 256 --save_json "${RESULTS}/advisor" --skip_plot \
    | tee "${RESULTS}/advisor/run_tracecov.log"
  ADVISOR_SECONDS=$(( $(date +%s) - ADV_START ))
fi
TOTAL_SECONDS=$(( $(date +%s) - START ))
{
  echo ""
  echo "Settings: model ${MODEL}, K in {${K_LIST}}, seeds {${SEEDS}}, budget ${BUDGET} sequences per step,"
  echo "${STEPS} steps, lr ${LR}, ${N_TRAIN} training / ${N_TEST} held-out problems, responses <= ${MAX_RESPONSE_LENGTH} tokens,"
  echo "validation every ${TEST_FREQ} steps, ${JOBS} runs side by side."
  echo "Wall time: ${TRAIN_SECONDS} s training, ${ADVISOR_SECONDS:-0} s advisor, ${TOTAL_SECONDS} s in all ($(getconf _NPROCESSORS_ONLN) CPU cores, shared)."
  if [[ "${ADVISOR}" == 1 ]]; then grep -h -A2 "group-size advisor" "${RESULTS}/advisor/run_tracecov.log"; fi
} >> "${RESULTS}/summary.md"
publish_output "${RESULTS}" "${FINAL_RESULTS}"
echo "== done in ${TOTAL_SECONDS} s: ${FINAL_RESULTS}/"
