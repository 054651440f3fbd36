#!/usr/bin/env bash
# Test the group-size advisor against training (issue 19, item 4): per setting, the advisor runs first on the
# starting policy and its prediction is written with a time; then a pilot (its own seeds) and the sweep.
#
#   bash scripts/k_validation.sh          # about 40 min on 2 free CPU cores; not part of CI
#
# Settings (environment, KVAL_ prefix): KVAL_SETTINGS ("train_mixed train_nodivision tiny_mixed train_mixed_t1.5"; POLICY_KINDS with POLICY train
#   (assets/train_policy) or tiny (assets/tiny_policy) and KINDS mixed (all five problem kinds), division (exact
#   division only) or nodivision (the other four kinds), optionally followed by _tTEMP (sampling temperature of the
#   advisor and of the training rollouts; default 1.0) and _lrLR (learning rate; default KVAL_LR), e.g. tiny_mixed_lr1e-4)
#   KVAL_K_LIST ("2 4 8 16")  KVAL_SEEDS ("0 1 2 3 4 5 6 7")  KVAL_PILOT_SEEDS ("100")  KVAL_PILOT_K ("2 16")
#   KVAL_BUDGET (128)  KVAL_STEPS (12)  KVAL_LR (1e-5)  KVAL_TEST_FREQ (3)  KVAL_N_TEST (200 held-out problems)
#   KVAL_MAX_RESPONSE_LENGTH (16)  KVAL_JOBS (2 runs side by side, one thread each)
#   KVAL_ADVISOR_T (48 prompts)  KVAL_ADVISOR_M (8 groups)  KVAL_STAGES ("advisor pilot sweep summary")
#   KVAL_ADVISOR_ESTIMATOR (grpo_std: the advisor also measures the std-normalised estimator TRL trains with at each
#   K, besides the paper's GRPO decomposition; grpo: the decomposition only)
#   KVAL_ADVISOR_SPLIT (train: the advisor's KVAL_ADVISOR_T prompts are a random sample, seed KVAL_ADVISOR_SEED (0),
#   of the setting's training set, the distribution training draws from; test: of its held-out set)
#   KVAL_WORK (outputs/k_validation: data, logs, wandb runs)  KVAL_RESULTS (outputs/k_validation_results; the
#   committed results/k_validation, or any folder holding files tracked by git, only with KVAL_OVERWRITE=1)
# Stage "adaptive" (issue 19 item 7; not in the default stages; about 21 min): adaptive-K TRL runs of one setting
#   (KVAL_ADAPTIVE_SETTING, default train_mixed) for every sweep seed, K chosen from KVAL_K_LIST by the advisor
#   on the current policy at step 0 and every KVAL_ADAPTIVE_EVERY (4) steps, on KVAL_ADAPTIVE_T (32) training
#   prompts, KVAL_ADAPTIVE_M (8) groups, KVAL_ADAPTIVE_N_ORACLE (64) samples for V; KVAL_ADAPTIVE_START_K (4) is
#   the K kept when the advisor ties; compared with the committed sweep (the same metric) in RESULTS/adaptive/.
#   KVAL_ADAPTIVE_TAG (adaptive) names the runs; another tag (e.g. adaptive_T16M4) keeps a second arm apart
#   (its results are named SETTING_TAG).
# Only settings whose pilot learns (mean held-out gain from step 0 to the last step every pilot run reached,
# as in Table 2; interrupted runs left out, >= 0.03) are swept.
# Metric, declared here before any sweep: the mean held-out greedy accuracy over the validation steps after
# step 0 (steps TEST_FREQ, 2 TEST_FREQ, ..., STEPS), per run; per K its mean and 95% t-interval over seeds.
# Validation uses KVAL_N_TEST held-out problems of the setting's own kinds (test seed 0; training seed 1).
# KVAL_WORK is deleted and rebuilt only if an earlier run of this script made it (marker file).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}"
source scripts/demo_guard.sh
die() { fail "k_validation.sh: $*"; }
no_arguments "$0" 19 "$@"
export PYTHONPATH="${REPO}${PYTHONPATH:+:${PYTHONPATH}}"
PY="${KVAL_PYTHON:-python}"
SETTINGS="${KVAL_SETTINGS:-train_mixed train_nodivision tiny_mixed train_mixed_t1.5}"
K_LIST="${KVAL_K_LIST:-2 4 8 16}"
SEEDS="${KVAL_SEEDS:-0 1 2 3 4 5 6 7}"
PILOT_SEEDS="${KVAL_PILOT_SEEDS:-100}"
PILOT_K="${KVAL_PILOT_K:-2 16}"
BUDGET="${KVAL_BUDGET:-128}"
STEPS="${KVAL_STEPS:-12}"
LR="${KVAL_LR:-1e-5}"
TEST_FREQ="${KVAL_TEST_FREQ:-3}"
N_TEST="${KVAL_N_TEST:-200}"
MAX_RESPONSE_LENGTH="${KVAL_MAX_RESPONSE_LENGTH:-16}"
JOBS="${KVAL_JOBS:-2}"
ADVISOR_T="${KVAL_ADVISOR_T:-48}"
ADVISOR_M="${KVAL_ADVISOR_M:-8}"
ADVISOR_SPLIT="${KVAL_ADVISOR_SPLIT:-train}"
ADVISOR_ESTIMATOR="${KVAL_ADVISOR_ESTIMATOR:-grpo_std}"
ADVISOR_SEED="${KVAL_ADVISOR_SEED:-0}"
STAGES="${KVAL_STAGES:-advisor pilot sweep summary}"
WORK="${KVAL_WORK:-outputs/k_validation}"
RESULTS="${KVAL_RESULTS:-outputs/k_validation_results}"
COMMITTED="results/k_validation"  # the committed results: read by the adaptive stage, replaced only on request
OVERWRITE="${KVAL_OVERWRITE:-0}"
MARKER=".made_by_k_validation"
ADAPTIVE_SETTING="${KVAL_ADAPTIVE_SETTING:-train_mixed}"
ADAPTIVE_EVERY="${KVAL_ADAPTIVE_EVERY:-4}"
ADAPTIVE_T="${KVAL_ADAPTIVE_T:-32}"
ADAPTIVE_M="${KVAL_ADAPTIVE_M:-8}"
ADAPTIVE_N_ORACLE="${KVAL_ADAPTIVE_N_ORACLE:-64}"
ADAPTIVE_START_K="${KVAL_ADAPTIVE_START_K:-4}"
ADAPTIVE_TAG="${KVAL_ADAPTIVE_TAG:-adaptive}"
[[ "${ADAPTIVE_TAG}" =~ ^adaptive[A-Za-z0-9_.-]*$ ]] || die "KVAL_ADAPTIVE_TAG=${ADAPTIVE_TAG}: use adaptive, or adaptive followed by letters, digits, _ . -"
ADAPTIVE_NAME="${ADAPTIVE_SETTING}${ADAPTIVE_TAG#adaptive}"  # train_mixed, or e.g. train_mixed_T16M4

for name in BUDGET STEPS TEST_FREQ N_TEST MAX_RESPONSE_LENGTH JOBS ADVISOR_T ADVISOR_M ADAPTIVE_EVERY ADAPTIVE_T ADAPTIVE_M \
            ADAPTIVE_N_ORACLE ADAPTIVE_START_K; do
  [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || die "KVAL_${name}=${!name} must be a positive integer"
done
[[ "${ADVISOR_SPLIT}" =~ ^(train|test)$ ]] || die "KVAL_ADVISOR_SPLIT=${ADVISOR_SPLIT}: use train or test"
[[ "${ADVISOR_ESTIMATOR}" =~ ^(grpo|grpo_std)$ ]] || die "KVAL_ADVISOR_ESTIMATOR=${ADVISOR_ESTIMATOR}: use grpo or grpo_std"
[[ "${ADVISOR_SEED}" =~ ^[0-9]+$ ]] || die "KVAL_ADVISOR_SEED=${ADVISOR_SEED} must be a whole number"
for k in ${K_LIST} ${PILOT_K}; do
  [[ "${k}" =~ ^[1-9][0-9]*$ ]] && (( k >= 2 )) || die "group size ${k} must be an integer >= 2"
done
for s in ${SEEDS} ${PILOT_SEEDS}; do [[ "${s}" =~ ^[0-9]+$ ]] || die "seed ${s} must be a whole number"; done
for s in ${PILOT_SEEDS}; do
  for t in ${SEEDS}; do [[ "${s}" != "${t}" ]] || die "pilot seed ${s} is also a sweep seed: the sweep must not reuse it"; done
done
model_of() { echo "assets/${1%%_*}_policy"; }
kinds_of() { local rest="${1#*_}"; echo "${rest%%_*}"; }
field_of() { local f; for f in $(tr _ ' ' <<< "$1"); do [[ "${f}" =~ ^$2([0-9].*)$ ]] && { echo "${BASH_REMATCH[1]}"; return; }; done; echo "$3"; }
temperature_of() { field_of "$1" t 1.0; }
lr_of() { field_of "$1" lr "${LR}"; }
for s in ${SETTINGS} ${ADAPTIVE_SETTING}; do
  [[ "${s}" =~ ^(train|tiny)_(mixed|division|nodivision)(_t[0-9]*\.?[0-9]+)?(_lr[0-9.]+(e-?[0-9]+)?)?$ ]] \
    || die "setting ${s}: use POLICY_KINDS[_tTEMP][_lrLR], POLICY_KINDS (train|tiny)_(mixed|division|nodivision)"
  awk -v t="$(temperature_of "${s}")" 'BEGIN { exit !(t + 0 > 0) }' || die "setting ${s}: the temperature must be positive"
  awk -v x="$(lr_of "${s}")" 'BEGIN { exit !(x + 0 > 0 && x + 0 < 1) }' || die "setting ${s}: the learning rate must be in (0, 1)"
done
for stage in ${STAGES}; do
  [[ "${stage}" =~ ^(advisor|pilot|sweep|summary|adaptive)$ ]] || die "stage ${stage}: use advisor, pilot, sweep, summary or adaptive"
done
[[ " ${K_LIST} " == *" ${ADAPTIVE_START_K} "* ]] || die "KVAL_ADAPTIVE_START_K=${ADAPTIVE_START_K} is not in KVAL_K_LIST (${K_LIST})"
ALLOWED_K="${K_LIST}"
has_stage() { [[ " ${STAGES} " == *" $1 "* ]]; }
[[ "${OVERWRITE}" =~ ^[01]$ ]] || die "KVAL_OVERWRITE=${OVERWRITE}: use 0 or 1"
# never write into committed results by default (issue 25 case 1): checked before anything is deleted or written
if [[ -e "${RESULTS}" && ! -d "${RESULTS}" ]]; then die "KVAL_RESULTS=${RESULTS} is a file, not a folder"; fi
if [[ -d "${RESULTS}" && "${OVERWRITE}" != 1 && -n "$( (git ls-files -- "${RESULTS}" 2> /dev/null || true) | head -n 1)" ]]; then
  die "KVAL_RESULTS=${RESULTS} holds committed results (tracked by git); set KVAL_OVERWRITE=1 to write there, or choose another folder"
fi

if has_stage advisor; then  # a fresh start: data and the advisor's predictions come first
  if [[ -e "${WORK}" && ! -f "${WORK}/${MARKER}" ]]; then
    die "KVAL_WORK=${WORK} exists and was not made by this script; choose another folder"
  fi
  rm -rf "${WORK}"
  mkdir -p "${WORK}"
  touch "${WORK}/${MARKER}"
fi
if [[ "${STAGES}" == adaptive && ! -e "${WORK}" ]]; then  # the adaptive stage alone makes its own data
  mkdir -p "${WORK}"
  touch "${WORK}/${MARKER}"
fi
[[ -f "${WORK}/${MARKER}" ]] || die "KVAL_WORK=${WORK} has no data yet: include the advisor stage"
mkdir -p "${RESULTS}"
START=$(date +%s)

# run_one SETTING K SEED TAG: one TRL run through the sweep tool (DRY_RUN=0 is set: the sweep reads it)
run_one() {
  local setting=$1 k=$2 seed=$3 tag=$4
  LR="$(lr_of "${setting}")" TEMPERATURE="$(temperature_of "${setting}")" \
  MODEL="$(model_of "${setting}")" DATA_DIR="${WORK}/data_$(kinds_of "${setting}")" BASE="${WORK}/${tag}_${setting}" RUN_TAG="${tag}" \
    "${PY}" Policy_Optimization/sweep_group_size.py --K_list "${k}" --seeds "${seed}" --budget "${BUDGET}" \
    --run_tag "${tag}" -- --max_steps "${STEPS}" --threads 1 > "${WORK}/${tag}_${setting}_K${k}_seed${seed}.log" 2>&1
}

# runs TAG "K..." "SEED..." SETTING...: every (setting, seed, K), KVAL_JOBS at a time
runs() {
  local tag=$1 ks=$2 seeds=$3 setting seed k pids=() failed=0
  shift 3
  for seed in ${seeds}; do
    for setting in "$@"; do
      for k in ${ks}; do
        run_one "${setting}" "${k}" "${seed}" "${tag}" &
        pids+=($!)
        while (( $(jobs -rp | wc -l) >= JOBS )); do sleep 2; done
      done
    done
  done
  for pid in "${pids[@]}"; do wait "${pid}" || failed=1; done
  (( failed == 0 )) || die "a ${tag} run failed: see ${WORK}/${tag}_*.log and ${WORK}/${tag}_*/logs/"
  for setting in "$@"; do  # the wandb offline records (the console lines hold \r progress bars)
    "${PY}" Policy_Optimization/collect_runs.py "${WORK}/${tag}_${setting}/wandb" \
      --out "${COLLECT_DIR:-${RESULTS}}/${tag}_runs_${setting}.csv" ${COLLECT_METRICS:+--metrics "${COLLECT_METRICS}"}
  done
}

export TRAINER=trl WANDB_MODE=offline LR TEST_FREQ MAX_RESPONSE_LENGTH SAVE_MODEL=0 \
       LOGGERS="[console,wandb]" OMP_NUM_THREADS=1 DRY_RUN=0
trap 'kill $(jobs -p) 2> /dev/null; echo "k_validation.sh: interrupted" >&2; exit 130' INT TERM

# make_data SETTING...: the arithmetic data (zero-shot; training seed 1, test seed 0) and each setting's kinds
make_data() {
  local kinds
  echo "== data: arithmetic, zero-shot; settings $*"
  [[ -d "${WORK}/data_all" ]] \
    || "${PY}" Policy_Optimization/prepare_data.py --source arithmetic --n_train 8192 --n_test 2000 --out_dir "${WORK}/data_all"
  for kinds in $(for s in "$@"; do kinds_of "${s}"; done | sort -u); do
    [[ -d "${WORK}/data_${kinds}" ]] || "${PY}" scripts/k_validation.py subset "${WORK}/data_all" \
      "${WORK}/data_${kinds}" --kinds "${kinds}" --n_test "${N_TEST}"
  done
}

if has_stage advisor; then
  make_data ${SETTINGS}
  for setting in ${SETTINGS}; do
    temp="$(temperature_of "${setting}")"
    echo "== advisor, ${setting}: starting policy, ${ADVISOR_T} random ${ADVISOR_SPLIT} prompts (seed ${ADVISOR_SEED}), temperature ${temp}, top-p 1 (the TRL sampler)"
    out="${WORK}/advisor_${setting}" MODEL="$(model_of "${setting}")"
    mkdir -p "${out}"
    "${PY}" Gradient_evaluation/calculate_oracle_v.py --model "${MODEL}" --dataset "${WORK}/data_$(kinds_of "${setting}")/${ADVISOR_SPLIT}.parquet" \
      --device cpu --dtype fp32 --sample "${ADVISOR_T}" --seed "${ADVISOR_SEED}" --n_oracle 256 --batch_size 256 --temperature "${temp}" --top_p 1.0 \
      --max_new_tokens "${MAX_RESPONSE_LENGTH}" --out_dir "${out}"
    # shellcheck disable=SC2086
    "${PY}" Gradient_evaluation/run_tracecov.py --model "${MODEL}" --oracle_table "${out}"/oracle_v_n*.jsonl \
      --device cpu --dtype fp32 --T "${ADVISOR_T}" --M "${ADVISOR_M}" --K_list ${K_LIST} --temperature "${temp}" --top_p 1.0 \
      --max_new_tokens "${MAX_RESPONSE_LENGTH}" --gen_bs 256 --save_json "${out}" --skip_plot --budget "${BUDGET}" \
      --allowed_K ${ALLOWED_K} --estimators grpo oracleV grpo_std --advisor_estimator "${ADVISOR_ESTIMATOR}" \
      | tee "${out}/run_tracecov.log"
    mkdir -p "${RESULTS}/advisor_${setting}"
    cp "${out}"/tracecov_*.json "${out}"/tracecov_*.csv "${out}/run_tracecov.log" "${RESULTS}/advisor_${setting}/"
    "${PY}" scripts/k_validation.py predict "${out}"/tracecov_*[0-9].json --name "${setting}" \
      --out "${RESULTS}/prediction_${setting}.json"
  done
fi

# shellcheck disable=SC2086
if has_stage pilot; then
  echo "== pilot: K in {${PILOT_K}}, seeds {${PILOT_SEEDS}} (never reused by the sweep)"
  runs pilot "${PILOT_K}" "${PILOT_SEEDS}" ${SETTINGS}
fi
if has_stage adaptive; then  # issue 19 item 7: adaptive K against the committed sweep of the same setting
  # shellcheck disable=SC2086
  make_data ${ADAPTIVE_SETTING}
  mkdir -p "${RESULTS}/adaptive"
  date -u +%Y-%m-%dT%H:%M:%SZ > "${RESULTS}/adaptive/started_at_${ADAPTIVE_NAME}.txt"
  echo "== adaptive K (${ADAPTIVE_TAG}): ${ADAPTIVE_SETTING}, K in {${K_LIST}} re-estimated every ${ADAPTIVE_EVERY} steps, seeds {${SEEDS}}"
  ADAPTIVE_K_EVERY="${ADAPTIVE_EVERY}" ADAPTIVE_K_LIST="${K_LIST}" ADAPTIVE_K_T="${ADAPTIVE_T}" ADAPTIVE_K_M="${ADAPTIVE_M}" \
    ADAPTIVE_K_N_ORACLE="${ADAPTIVE_N_ORACLE}" COLLECT_DIR="${RESULTS}/adaptive" \
    COLLECT_METRICS='^(val-core/|critic/score/mean$|trl/group_size$|adaptive_k/)' \
    runs "${ADAPTIVE_TAG}" "${ADAPTIVE_START_K}" "${SEEDS}" "${ADAPTIVE_SETTING}"
  sweep_csv="${RESULTS}/sweep_runs_${ADAPTIVE_SETTING}.csv"
  [[ -f "${sweep_csv}" ]] || sweep_csv="${COMMITTED}/sweep_runs_${ADAPTIVE_SETTING}.csv"  # read only
  "${PY}" scripts/k_validation.py adaptive "${RESULTS}/adaptive/${ADAPTIVE_TAG}_runs_${ADAPTIVE_SETTING}.csv" \
    "${sweep_csv}" --name "${ADAPTIVE_NAME}" --out_dir "${RESULTS}/adaptive" \
    --started_at "$(cat "${RESULTS}/adaptive/started_at_${ADAPTIVE_NAME}.txt")"
fi
[[ " ${STAGES} " =~ \ (pilot|sweep|summary)\  ]] || { echo "== done in $(( $(date +%s) - START )) s: ${RESULTS}/"; exit 0; }
swept=""
for setting in ${SETTINGS}; do
  if "${PY}" scripts/k_validation.py pilot "${RESULTS}/pilot_runs_${setting}.csv"; then
    swept="${swept} ${setting}"
  else
    echo "${setting}: the pilot does not learn in this regime; not swept"
  fi
done
[[ -n "${swept}" ]] || die "no setting learns in its pilot: nothing to sweep"
# shellcheck disable=SC2086
if has_stage sweep; then
  for setting in ${swept}; do
    [[ -f "${RESULTS}/prediction_${setting}.json" ]] || die "no advisor prediction for ${setting}: run the advisor stage first"
  done
  for setting in ${swept}; do date -u +%Y-%m-%dT%H:%M:%SZ > "${RESULTS}/sweep_started_at_${setting}.txt"; done
  echo "== sweep: K in {${K_LIST}} x seeds {${SEEDS}}, ${BUDGET} sequences per step, ${STEPS} steps, lr ${LR}"
  runs sweep "${K_LIST}" "${SEEDS}" ${swept}
fi
if has_stage summary; then
  args=()
  for setting in ${swept}; do
    args+=(--setting "${setting}" "${RESULTS}/sweep_runs_${setting}.csv" "${RESULTS}/prediction_${setting}.json"
           "$(cat "${RESULTS}/sweep_started_at_${setting}.txt")")
  done
  "${PY}" scripts/k_validation.py summarize "${args[@]}" --out_dir "${RESULTS}"
fi
echo "== done in $(( $(date +%s) - START )) s: ${RESULTS}/"
