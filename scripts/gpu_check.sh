#!/usr/bin/env bash
# The GPU check: what one call of at most 10 minutes on one GPU can prove (docs/gpu.md). The step limits plus their
# kill margins add up to at most 480 s; steps run in priority order, and a step that would take the total over
# 480 s is recorded as skipped (GPU_CHECK_STEPS selects steps, e.g. the vLLM/VERL ones, for another call).
#
#   GPU_CHECK_OUT=$OUT bash scripts/gpu_check.sh       # on the GPU machine; $OUT: any new or empty folder
#   GPU_CHECK_EMULATE=cpu bash scripts/gpu_check.sh    # every step on the CPU at small sizes (same code path)
#   GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh      # print the plan (steps, limits, skips); writes nothing
#
# Steps, in priority order: versions; (a) oracle_fp32, tracecov_fp32, oracle_bf16, tracecov_bf16 (the oracle
# and trace-covariance scripts with the HF backend on the built-in policy) and demo_agrees (both compared with
# the committed CPU run results/demo: oracle V per prompt, traces by paired z-scores); (b) bench_0_5b and
# bench_1_5b (fast vs reference engine at Qwen2.5 shapes, random weights, bf16); (c) advisor (on the bf16 run);
# (d) c1_memory (c1 at 1.5B: host and disk estimate, the --c1_batch that fits) and hf_sampling (tokens/s of the
# HF sampler at the largest batch that fits, Qwen2.5-1.5B shapes); then the steps that need vLLM (oracle_vllm,
# vllm_agrees, tracecov_vllm) or VERL, Ray and vLLM (prepare_data, verl_train, collect).
# A step whose packages are missing is recorded "skipped: not installed (...)" and the script goes on.
# Outputs, all under the folder: <step>.log (console), each step's JSON as it ends (skipped steps: <step>.json
# with the reason), and status.json, rewritten after every step (state, exit code, seconds, limit, output), so a
# call cut short still returns what ran. Exit 0 when every step that ran passed, 1 otherwise, 2 on bad settings.
# Settings: GPU_CHECK_OUT (default outputs/gpu_check, git-ignored; committed results go to results/gpu_check/),
# GPU_CHECK_PYTHON (python), GPU_CHECK_EMULATE (cpu), GPU_CHECK_STEPS (step names, default all),
# GPU_CHECK_LIMIT_SCALE (multiplies the limits; 4 when emulating),
# GPU_CHECK_DRY_RUN (0/1), GPU_CHECK_HIDE (modules to treat as not installed, e.g. "vllm verl": for tests).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}" || exit 2
source scripts/demo_guard.sh
die() { fail "gpu_check.sh: $*"; }
no_arguments "$0" 25 "$@"
PY="${GPU_CHECK_PYTHON:-python}"
OUT="${GPU_CHECK_OUT:-outputs/gpu_check}"
DRY="${GPU_CHECK_DRY_RUN:-0}"
EMULATE="${GPU_CHECK_EMULATE:-}"
SELECTED=" $(echo "${GPU_CHECK_STEPS:-all}" | tr ',' ' ') "
BUDGET=480  # seconds: the step limits plus their kill margins, so that the call stays well inside 600 s
MARGIN=5    # seconds a step may run past its limit before it is killed
[[ "${DRY}" =~ ^[01]$ ]] || die "GPU_CHECK_DRY_RUN=${DRY}: use 0 or 1"
[[ -z "${EMULATE}" || "${EMULATE}" == cpu ]] || die "GPU_CHECK_EMULATE=${EMULATE}: use cpu (or leave it unset)"
# GPU_CHECK_LIMIT_SCALE multiplies every step's limit (default 1; 4 in the emulation, whose small sizes a shared
# CPU runs slower than the GPU runs the real ones); the 480 s budget is always checked on the unscaled limits
SCALE="${GPU_CHECK_LIMIT_SCALE:-$([[ -n "${EMULATE}" ]] && echo 4 || echo 1)}"
[[ "${SCALE}" =~ ^[1-9][0-9]?$ ]] || die "GPU_CHECK_LIMIT_SCALE=${SCALE}: use an integer from 1 to 99"
STEPS="versions oracle_fp32 tracecov_fp32 oracle_bf16 tracecov_bf16 demo_agrees bench_0_5b bench_1_5b advisor \
c1_memory hf_sampling oracle_vllm vllm_agrees tracecov_vllm prepare_data verl_train collect"
for name in ${SELECTED}; do
  [[ "${name}" == all || " ${STEPS} " == *" ${name} "* ]] || die "GPU_CHECK_STEPS: unknown step ${name} (steps: ${STEPS})"
done
export PYTHONPATH="${REPO}${PYTHONPATH:+:${PYTHONPATH}}"
if [[ -n "${GPU_CHECK_HIDE:-}" ]]; then
  export GPU_CHECK_HIDE PYTHONPATH="${REPO}/scripts/hide_modules:${PYTHONPATH}"
fi
MARKER_FILE=".made_by_gpu_check"
if [[ "${DRY}" == 0 ]]; then
  if [[ -z "${EMULATE}" ]]; then
    command -v nvidia-smi > /dev/null \
      || die "no nvidia-smi: run this on a machine with an NVIDIA GPU (or GPU_CHECK_EMULATE=cpu, GPU_CHECK_DRY_RUN=1)"
  fi
  [[ -f assets/tiny_policy/config.json ]] || die "assets/tiny_policy is missing"
  [[ ! -e "${OUT}" || -d "${OUT}" ]] || die "GPU_CHECK_OUT=${OUT} is a file, not a folder"
  if [[ -d "${OUT}" && -n "$(ls -A "${OUT}")" ]]; then
    [[ -f "${OUT}/${MARKER_FILE}" ]] || die "GPU_CHECK_OUT=${OUT} is not empty and was not made by this script"
    [[ -z "$(git ls-files -- "${OUT}" 2> /dev/null | head -n 1)" ]] \
      || die "GPU_CHECK_OUT=${OUT} holds files tracked by git; copy results to results/gpu_check/ yourself"
    find "${OUT}" -mindepth 1 -delete || die "cannot empty GPU_CHECK_OUT=${OUT}"
  fi
  mkdir -p "${OUT}" && touch "${OUT}/${MARKER_FILE}" || die "cannot create GPU_CHECK_OUT=${OUT}"
  OUT="$(cd "${OUT}" && pwd)"
  [[ -z "${EMULATE}" ]] && { nvidia-smi > "${OUT}/nvidia_smi.txt" 2>&1 || true; }
fi

# Sizes: the GPU run, or the CPU emulation (same scripts and flags, small sizes, device cpu, fp32 timing on CPU).
DEMO_ORACLE=$(ls results/demo/oracle_v_n*.jsonl 2> /dev/null | head -n 1)
DEMO_TRACES=$(ls results/demo/tracecov_*_per_prompt.csv 2> /dev/null | head -n 1)
[[ -n "${DEMO_ORACLE}" && -n "${DEMO_TRACES}" ]] || die "results/demo is missing its oracle table or per-prompt CSV"
if [[ -z "${EMULATE}" ]]; then
  DEV=cuda; ORACLE_LIMIT=32; N_ORACLE=256; T=32; M=8; K_LIST="2 4 8"; C1_BATCH=8
  BENCH=(--T 1 --M 4 --K_list 4 --max_new_tokens 16); SMALL=""; SAMPLING=(--max_new_tokens 64 --batch_start 32)
else
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  DEV=cpu; ORACLE_LIMIT=6; N_ORACLE=32; T=6; M=3; K_LIST="2 4"; C1_BATCH=3
  BENCH=(--T 1 --M 2 --K_list 2 --max_new_tokens 4); SMALL=toy; SAMPLING=(--max_new_tokens 4 --batch_start 2 --batch_max 4)
fi

START=$(date +%s)
failed=0
planned=0
RECORDS=""
declare -A STATE  # step name -> its state, for the steps that use another's output

write_status() {  # status.json: every step recorded so far, rewritten atomically
  printf '{"steps": [%s], "elapsed_seconds": %d, "planned_seconds": %d, "budget_seconds": %d, "emulate": "%s", "complete": %s}\n' \
    "${RECORDS}" "$(( $(date +%s) - START ))" "${planned}" "${BUDGET}" "${EMULATE}" "$1" \
    > "${OUT}/status.json.tmp" && mv "${OUT}/status.json.tmp" "${OUT}/status.json"
}

record() {  # record NAME STATE EXIT SECONDS LIMIT OUTPUT
  STATE[$1]="$2"
  RECORDS="${RECORDS:+${RECORDS}, }{\"step\": \"$1\", \"state\": \"$2\", \"exit\": $3, \"seconds\": $4, \"limit\": $5, \"output\": \"$6\"}"
  write_status false
}

skip() {  # skip NAME LIMIT OUTPUT REASON: <step>.json says why, status.json records it
  echo "== $1: skipped: $4"
  [[ "${DRY}" == 1 ]] && return 0
  printf '{"step": "%s", "state": "skipped: %s"}\n' "$1" "$4" > "${OUT}/$1.json"
  record "$1" "skipped: $4" null 0 "$2" "$1.json"
}

# step NAME LIMIT NEEDS OUTPUT COMMAND...: run COMMAND under LIMIT seconds when NAME is selected, the modules in
# NEEDS are installed, the steps in NEEDS (@name) passed, and the plan stays within the budget ("-": no needs);
# OUTPUT is the JSON (or folder) it writes
step() {
  local name="$1" limit="$2" needs="$3" output="$4" t0 code seconds missing=() modules=() item
  shift 4
  if [[ "${SELECTED}" != " all " && "${SELECTED}" != *" ${name} "* ]]; then
    skip "${name}" "${limit}" "${name}.json" "not selected (GPU_CHECK_STEPS)"; return 0
  fi
  for item in ${needs/#-/}; do
    [[ "${item}" == @* ]] || modules+=("${item}")
  done
  if (( ${#modules[@]} )); then
    for module in "${modules[@]}"; do
      "${PY}" scripts/gpu_check_steps.py installed "${module}" || missing+=("${module}")
    done
    if (( ${#missing[@]} )); then
      skip "${name}" "${limit}" "${name}.json" "not installed (${missing[*]})"; return 0
    fi
    if [[ -n "${EMULATE}" ]]; then
      skip "${name}" "${limit}" "${name}.json" "needs CUDA (not emulated)"; return 0
    fi
  fi
  for item in ${needs/#-/}; do
    if [[ "${item}" == @* && "${DRY}" == 0 && "${STATE[${item#@}]:-}" != ok ]]; then
      skip "${name}" "${limit}" "${name}.json" "needs step ${item#@}, which did not pass"; return 0
    fi
  done
  if (( planned + limit + MARGIN > BUDGET )); then
    skip "${name}" "${limit}" "${name}.json" "beyond the ${BUDGET} s budget (run it alone: GPU_CHECK_STEPS=${name})"
    return 0
  fi
  planned=$(( planned + limit + MARGIN ))
  echo "== ${name} (${limit} s): $*"
  [[ "${DRY}" == 1 ]] && return 0
  limit=$(( limit * SCALE ))
  t0=$(date +%s)
  timeout --kill-after="${MARGIN}" "${limit}" "$@" > "${OUT}/${name}.log" 2>&1
  code=$?
  seconds=$(( $(date +%s) - t0 ))
  local state=ok
  (( code == 0 )) || state=failed
  (( code == 124 || code == 137 )) && state="failed: time limit"
  [[ "${state}" == ok && ! -e "${OUT}/${output}" ]] && state="failed: no ${output}"
  echo "${name}: ${state} (exit ${code}, ${seconds} s)"
  record "${name}" "${state}" "${code}" "${seconds}" "${limit}" "${output}"
  [[ "${state}" == ok ]] || { failed=1; tail -n 20 "${OUT}/${name}.log"; }
}

[[ "${DRY}" == 1 ]] || write_status false
step versions 15 - versions.json "${PY}" scripts/gpu_check_steps.py versions "${OUT}/versions.json"

# (a) the oracle and trace-covariance scripts on the device, HF backend, built-in policy, fp32 and bf16
for DTYPE in fp32 bf16; do
  step "oracle_${DTYPE}" 35 - "oracle_${DTYPE}" "${PY}" Gradient_evaluation/calculate_oracle_v.py \
    --model assets/tiny_policy --dataset data/arithmetic_zero_shot.jsonl --limit "${ORACLE_LIMIT}" \
    --n_oracle "${N_ORACLE}" --batch_size 256 --device "${DEV}" --dtype "${DTYPE}" --seed 0 --backend hf \
    --out_dir "${OUT}/oracle_${DTYPE}"
  # the committed CPU run's oracle table: the same V, so the traces differ only by the groups sampled
  step "tracecov_${DTYPE}" 45 - "tracecov_${DTYPE}" "${PY}" Gradient_evaluation/run_tracecov.py \
    --model assets/tiny_policy --oracle_table "${DEMO_ORACLE}" --device "${DEV}" --dtype "${DTYPE}" --T "${T}" \
    --M "${M}" --K_list ${K_LIST} --c1_batch "${C1_BATCH}" --gen_bs 256 --save_json "${OUT}/tracecov_${DTYPE}" \
    --skip_plot
done
step demo_agrees 15 "@oracle_fp32 @tracecov_fp32 @oracle_bf16 @tracecov_bf16" demo_agrees_traces_bf16.json bash -c 'status=0
for dtype in fp32 bf16; do
  "$0" scripts/compare_oracle_tables.py "$1"/oracle_${dtype}/oracle_v_*.jsonl "$2" \
    --out "$1/demo_agrees_oracle_${dtype}.json" || status=1
  "$0" scripts/compare_tracecov_runs.py "$1"/tracecov_${dtype}/tracecov_*_per_prompt.csv "$3" \
    --shared_prompts --out "$1/demo_agrees_traces_${dtype}.json"
  code=$?  # 3: cannot tell (nothing found, too few prompts to see x1.5; the JSON says so): not a failure
  [ $code -eq 0 ] || [ $code -eq 3 ] || status=1
done
exit $status' "${PY}" "${OUT}" "${DEMO_ORACLE}" "${DEMO_TRACES}"

# (b) fast vs reference engine at Qwen2.5 shapes (random weights, no download), bf16
step bench_0_5b 55 - bench_0_5b.json "${PY}" scripts/bench_engines.py --qwen_shapes "${SMALL:-0.5B}" \
  --device "${DEV}" --dtype bf16 "${BENCH[@]}" --repeats 1 --cases zero_shot --out "${OUT}/bench_0_5b.json"
step bench_1_5b 70 - bench_1_5b.json "${PY}" scripts/bench_engines.py --qwen_shapes "${SMALL:-1.5B}" \
  --device "${DEV}" --dtype bf16 "${BENCH[@]}" --repeats 1 --cases zero_shot --out "${OUT}/bench_1_5b.json"

# (c) the advisor on the bf16 run; (d) c1 memory at 1.5B and the HF sampler's throughput
step advisor 15 @tracecov_bf16 advisor.json bash -c '"$0" plots/make_figures.py --advisor "$1"/tracecov_bf16/tracecov_*[0-9].json \
--out_dir "$1/advisor" && "$0" scripts/gpu_check_steps.py advisor "$1"/tracecov_bf16/tracecov_*[0-9].json \
"$1/advisor.json"' "${PY}" "${OUT}"
step c1_memory 20 - c1_memory.json "${PY}" scripts/c1_plan.py --qwen_shapes 1.5B --c1_batch 16 --dir "${OUT}" \
  --out "${OUT}/c1_memory.json"
step hf_sampling 35 - hf_sampling.json "${PY}" scripts/bench_sampling.py --qwen_shapes "${SMALL:-1.5B}" \
  --device "${DEV}" --dtype bf16 "${SAMPLING[@]}" --seconds 30 --out "${OUT}/hf_sampling.json"

# Only on a machine with vLLM (and VERL, Ray): sampling with vLLM against HF, and three VERL training steps
VLLM=(--vllm_gpu_util 0.3 --vllm_enforce_eager --vllm_max_model_len 1024)
step oracle_vllm 75 vllm oracle_vllm "${PY}" Gradient_evaluation/calculate_oracle_v.py --model assets/tiny_policy \
  --dataset data/arithmetic_zero_shot.jsonl --limit 32 --n_oracle 256 --device cuda --dtype bf16 --seed 0 \
  --backend vllm "${VLLM[@]}" --out_dir "${OUT}/oracle_vllm"
step vllm_agrees 15 "vllm @oracle_vllm" vllm_agrees.json bash -c '"$0" scripts/compare_oracle_tables.py \
"$1"/oracle_vllm/oracle_v_*.jsonl "$2" --out "$1/vllm_agrees.json"' "${PY}" "${OUT}" "${DEMO_ORACLE}"
step tracecov_vllm 100 vllm tracecov_vllm "${PY}" Gradient_evaluation/run_tracecov.py --model assets/tiny_policy \
  --oracle_table "${DEMO_ORACLE}" --device cuda --dtype bf16 --backend vllm "${VLLM[@]}" --T 32 --M 4 \
  --K_list 2 4 8 --max_new_tokens 16 --c1_batch 8 --save_json "${OUT}/tracecov_vllm" --skip_plot
step prepare_data 20 "verl ray vllm" data "${PY}" Policy_Optimization/prepare_data.py --source arithmetic \
  --n_train 256 --n_test 64 --out_dir "${OUT}/data"
step verl_train 240 "verl ray vllm @prepare_data" verl env TRAINER=verl MODEL=assets/tiny_policy DATA_DIR="${OUT}/data" GPUS=1 \
  NNODES=1 GROUP_SIZE=8 BUDGET=64 SEED=0 MICRO_BSZ=8 GPU_UTIL=0.3 MAX_PROMPT_LENGTH=128 MAX_RESPONSE_LENGTH=32 \
  TEST_FREQ=1 SAVE_FREQ=3 MAX_CKPT_TO_KEEP=1 WANDB_MODE=offline BASE="${OUT}/verl" RUN_TAG=gpucheck \
  PYTHON_BIN="${PY}" CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" \
  bash Policy_Optimization/grpo_train.sh trainer.total_training_steps=3 trainer.val_before_train=True \
  actor_rollout_ref.rollout.enforce_eager=True
step collect 15 "verl ray vllm @verl_train" verl_runs.csv "${PY}" Policy_Optimization/collect_runs.py "${OUT}/verl/logs" \
  "${OUT}/verl/wandb" --out "${OUT}/verl_runs.csv"

echo "planned ${planned} s of ${BUDGET} s (limits plus ${MARGIN} s kill margins)"
(( planned <= BUDGET )) || die "the plan takes ${planned} s, over the ${BUDGET} s budget"
[[ "${DRY}" == 1 ]] && exit 0
write_status true
echo "total seconds=$(( $(date +%s) - START )); results in ${OUT}/ (status.json)"
exit "${failed}"
