#!/usr/bin/env bash
# One GPU check, under 10 minutes on one GPU, everything it measures under one folder (default outputs/gpu_check).
#
#   bash scripts/gpu_check.sh            # in the GPU environment (pip install -r requirements-gpu.txt)
#
# 1. benchmarks/bench_engines.py --qwen_shapes --device cuda --dtype bf16  (reference vs fast engine, Qwen2.5-0.5B shapes)
# 2. Gradient_evaluation/run_tracecov.py --backend vllm on 8 prompts of the built-in policy
# 3. three VERL training steps of the built-in policy on the arithmetic parquet through
#    Policy_Optimization/grpo_train.sh (GPUS=1, wandb offline), then collect_runs.py on its log
# Each step's console output is in <folder>/<step>.log and its exit code in <folder>/status.txt; the
# script goes on after a failed step and exits 1 if any failed. Settings: GPU_CHECK_OUT (the folder),
# GPU_CHECK_PYTHON (python). The folder is replaced only if an earlier run of this script made it.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}" || exit 2
source scripts/demo_guard.sh
die() { fail "gpu_check.sh: $*"; }
no_arguments "$0" 14 "$@"
export PYTHONPATH="${REPO}${PYTHONPATH:+:${PYTHONPATH}}"
PY="${GPU_CHECK_PYTHON:-python}"
OUT="${GPU_CHECK_OUT:-outputs/gpu_check}"
MARKER=".made_by_gpu_check"
command -v nvidia-smi > /dev/null || die "no nvidia-smi: run this on a machine with an NVIDIA GPU"
[[ -f assets/tiny_policy/config.json ]] || die "assets/tiny_policy is missing"
[[ ! -e "${OUT}" || -f "${OUT}/${MARKER}" ]] || die "GPU_CHECK_OUT=${OUT} exists and was not made by this script"
rm -rf "${OUT}"
mkdir -p "${OUT}" && touch "${OUT}/${MARKER}"
OUT="$(cd "${OUT}" && pwd)"
START=$(date +%s)
failed=0

step() {  # step NAME TIMEOUT_S COMMAND...: run, log, record exit code and seconds
  local name="$1" limit="$2" t0 code
  shift 2
  echo "== ${name}: $*"
  t0=$(date +%s)
  timeout "${limit}" "$@" > "${OUT}/${name}.log" 2>&1
  code=$?
  echo "${name} exit=${code} seconds=$(( $(date +%s) - t0 ))" | tee -a "${OUT}/status.txt"
  (( code == 0 )) || { failed=1; tail -n 20 "${OUT}/${name}.log"; }
}

nvidia-smi > "${OUT}/nvidia_smi.txt" 2>&1
"${PY}" -c "import torch, vllm, verl; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'vllm', \
vllm.__version__, 'verl', verl.__version__, torch.cuda.get_device_name(0))" > "${OUT}/versions.txt" 2>&1

step bench_engines 240 "${PY}" benchmarks/bench_engines.py --qwen_shapes --device cuda --dtype bf16 \
  --out "${OUT}/bench_engines.json"

ORACLE="$(ls results/demo/oracle_v_n*_tiny_policy_*.jsonl 2> /dev/null | head -n 1)"
step tracecov_vllm 180 "${PY}" Gradient_evaluation/run_tracecov.py --model assets/tiny_policy \
  --oracle_table "${ORACLE:-missing-oracle-table}" --device cuda --dtype bf16 --backend vllm --vllm_gpu_util 0.3 \
  --T 8 --M 4 --K_list 2 4 8 --max_new_tokens 16 --save_json "${OUT}/tracecov" --skip_plot

step prepare_data 60 "${PY}" Policy_Optimization/prepare_data.py --source arithmetic --n_train 256 --n_test 64 \
  --out_dir "${OUT}/data"
step verl_train 300 env TRAINER=verl MODEL=assets/tiny_policy DATA_DIR="${OUT}/data" GPUS=1 NNODES=1 \
  GROUP_SIZE=8 BUDGET=64 SEED=0 MICRO_BSZ=8 GPU_UTIL=0.3 MAX_PROMPT_LENGTH=128 MAX_RESPONSE_LENGTH=32 \
  TEST_FREQ=1 SAVE_FREQ=3 MAX_CKPT_TO_KEEP=1 WANDB_MODE=offline BASE="${OUT}/verl" RUN_TAG=gpucheck \
  PYTHON_BIN="${PY}" CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" \
  bash Policy_Optimization/grpo_train.sh trainer.total_training_steps=3 trainer.val_before_train=True
step collect 60 "${PY}" Policy_Optimization/collect_runs.py "${OUT}/verl/logs" "${OUT}/verl/wandb" \
  --out "${OUT}/verl_runs.csv"

echo "total seconds=$(( $(date +%s) - START ))" | tee -a "${OUT}/status.txt"
exit "${failed}"
