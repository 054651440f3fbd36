#!/usr/bin/env bash
# One GPU check, at most 10 minutes on one GPU (the step limits below add up to 600 s), everything it measures
# under one folder (default outputs/gpu_check). Run it first on a GPU machine (docs/gpu.md):
#
#   bash scripts/gpu_check.sh                     # in the GPU environment (pip install -r requirements-gpu.txt)
#   GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh # print the steps and their limits; runs and writes nothing
#
# Steps: versions; bench_engines (both engines at Qwen2.5-0.5B shapes, bf16); oracle_hf and oracle_vllm (the
# oracle script on GPU with each sampler, built-in policy, 8 prompts) and vllm_agrees (their V agree within
# intervals: scripts/compare_oracle_tables.py); tracecov_vllm (run_tracecov.py --backend vllm); prepare_data,
# verl_train (three VERL steps of the built-in policy, GPUS=1, wandb offline) and collect (collect_runs.py).
# vLLM runs with enforce_eager (no compile or CUDA-graph capture) in these short runs.
# Each step's console output is in <folder>/<step>.log; status.json (rewritten when each step ends) holds every
# finished step's exit code and seconds; a step's own JSON is in the folder as soon as it ends. The script goes
# on after a failed step and exits 1 if any failed. Settings: GPU_CHECK_OUT (the folder), GPU_CHECK_PYTHON
# (python), GPU_CHECK_DRY_RUN. The folder is replaced only if an earlier run of this script made it.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}" || exit 2
source scripts/demo_guard.sh
die() { fail "gpu_check.sh: $*"; }
no_arguments "$0" 17 "$@"
export PYTHONPATH="${REPO}${PYTHONPATH:+:${PYTHONPATH}}"
PY="${GPU_CHECK_PYTHON:-python}"
OUT="${GPU_CHECK_OUT:-outputs/gpu_check}"
DRY="${GPU_CHECK_DRY_RUN:-0}"
[[ "${DRY}" =~ ^[01]$ ]] || die "GPU_CHECK_DRY_RUN=${DRY}: use 0 or 1"
MARKER=".made_by_gpu_check"
if [[ "${DRY}" == 0 ]]; then
  command -v nvidia-smi > /dev/null || die "no nvidia-smi: run this on a machine with an NVIDIA GPU (or GPU_CHECK_DRY_RUN=1)"
  [[ -f assets/tiny_policy/config.json ]] || die "assets/tiny_policy is missing"
  [[ ! -e "${OUT}" || -f "${OUT}/${MARKER}" ]] || die "GPU_CHECK_OUT=${OUT} exists and was not made by this script"
  rm -rf "${OUT}"
  mkdir -p "${OUT}" && touch "${OUT}/${MARKER}"
  OUT="$(cd "${OUT}" && pwd)"
fi
START=$(date +%s)
failed=0
planned=0
RECORDS=""

step() {  # step NAME LIMIT_S COMMAND...: run under the limit, log, then rewrite status.json with this step
  local name="$1" limit="$2" t0 code seconds
  shift 2
  planned=$(( planned + limit ))
  echo "== ${name} (${limit} s): $*"
  [[ "${DRY}" == 1 ]] && return 0
  t0=$(date +%s)
  timeout --kill-after=10 "${limit}" "$@" > "${OUT}/${name}.log" 2>&1
  code=$?
  seconds=$(( $(date +%s) - t0 ))
  echo "${name} exit=${code} seconds=${seconds}$( (( code == 124 || code == 137 )) && echo ' (time limit)')"
  RECORDS="${RECORDS:+${RECORDS},}{\"step\": \"${name}\", \"exit\": ${code}, \"seconds\": ${seconds}, \"limit\": ${limit}}"
  printf '{"steps": [%s], "elapsed_seconds": %d}\n' "${RECORDS}" "$(( $(date +%s) - START ))" \
    > "${OUT}/status.json.tmp" && mv "${OUT}/status.json.tmp" "${OUT}/status.json"
  (( code == 0 )) || { failed=1; tail -n 20 "${OUT}/${name}.log"; }
}

[[ "${DRY}" == 1 ]] || nvidia-smi > "${OUT}/nvidia_smi.txt" 2>&1
step versions 15 "${PY}" -c "import sys, json, torch, vllm, verl; json.dump({'torch': torch.__version__, \
'cuda': torch.version.cuda, 'vllm': vllm.__version__, 'verl': verl.__version__, \
'gpu': torch.cuda.get_device_name(0)}, open(sys.argv[1], 'w'))" "${OUT}/versions.json"

step bench_engines 75 "${PY}" benchmarks/bench_engines.py --qwen_shapes --device cuda --dtype bf16 \
  --T 2 --M 4 --K_list 4 8 --max_new_tokens 16 --repeats 1 --cases zero_shot --out "${OUT}/bench_engines.json"

ORACLE_COMMON=(--model assets/tiny_policy --dataset data/arithmetic_zero_shot.jsonl --limit 8 --n_oracle 512
               --device cuda --dtype bf16 --seed 0)
step oracle_hf 45 "${PY}" Gradient_evaluation/calculate_oracle_v.py "${ORACLE_COMMON[@]}" --backend hf \
  --out_dir "${OUT}/oracle_hf"
step oracle_vllm 75 "${PY}" Gradient_evaluation/calculate_oracle_v.py "${ORACLE_COMMON[@]}" --backend vllm \
  --vllm_gpu_util 0.3 --vllm_enforce_eager --vllm_max_model_len 1024 --out_dir "${OUT}/oracle_vllm"
step vllm_agrees 15 bash -c '"$0" scripts/compare_oracle_tables.py "$1"/oracle_hf/oracle_v_*.jsonl \
"$1"/oracle_vllm/oracle_v_*.jsonl --out "$1/vllm_agrees.json"' "${PY}" "${OUT}"

step tracecov_vllm 100 bash -c '"$0" Gradient_evaluation/run_tracecov.py --model assets/tiny_policy \
--oracle_table "$1"/oracle_hf/oracle_v_*.jsonl --device cuda --dtype bf16 --backend vllm --vllm_gpu_util 0.3 \
--vllm_enforce_eager --vllm_max_model_len 1024 --T 8 --M 4 --K_list 2 4 8 --max_new_tokens 16 \
--save_json "$1/tracecov" --skip_plot' "${PY}" "${OUT}"

step prepare_data 20 "${PY}" Policy_Optimization/prepare_data.py --source arithmetic --n_train 256 --n_test 64 \
  --out_dir "${OUT}/data"
step verl_train 240 env TRAINER=verl MODEL=assets/tiny_policy DATA_DIR="${OUT}/data" GPUS=1 NNODES=1 \
  GROUP_SIZE=8 BUDGET=64 SEED=0 MICRO_BSZ=8 GPU_UTIL=0.3 MAX_PROMPT_LENGTH=128 MAX_RESPONSE_LENGTH=32 \
  TEST_FREQ=1 SAVE_FREQ=3 MAX_CKPT_TO_KEEP=1 WANDB_MODE=offline BASE="${OUT}/verl" RUN_TAG=gpucheck \
  PYTHON_BIN="${PY}" CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" \
  bash Policy_Optimization/grpo_train.sh trainer.total_training_steps=3 trainer.val_before_train=True \
  actor_rollout_ref.rollout.enforce_eager=True
step collect 15 "${PY}" Policy_Optimization/collect_runs.py "${OUT}/verl/logs" "${OUT}/verl/wandb" \
  --out "${OUT}/verl_runs.csv"

echo "total limit ${planned} s"
(( planned <= 600 )) || die "the step limits add up to ${planned} s, over the 10 minutes promised"
[[ "${DRY}" == 1 ]] && exit 0
echo "total seconds=$(( $(date +%s) - START ))"
exit "${failed}"
