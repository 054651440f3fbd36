#!/usr/bin/env bash
# Build a CPU virtualenv with the lent GPU machine's package set, then run the GPU check's CPU emulation in it:
# GPU_CHECK_EMULATE=cpu bash scripts/gpu_check.sh (docs/gpu.md). The set is Python 3.12, torch 2.11 (PyPI's x86_64
# wheel: the CUDA 13 build with its nvidia-* wheels, ~4.5 GB installed; it runs on a CPU), transformers 5.17,
# numpy, pandas, pyarrow, matplotlib, tqdm, safetensors, tokenizers, scipy, hypothesis, pytest, and NOT datasets,
# vllm, verl, trl, ray, math-verify or wandb (checked: the run refuses when any of them is importable).
#
#   bash scripts/gpu_env_check.sh      # first run ~5-10 min (downloads, install); then the check alone (~4 min)
#
# Settings: GPU_ENV_PYTHON (a python3.12; default: python3.12 on PATH, else ~/.pyenv/versions/3.12.*),
# GPU_ENV_DIR (the virtualenv, default ~/.cache/grpo_mse/gpu_env), GPU_ENV_WHEELS (downloaded wheels, kept so
# that reruns and rebuilds download nothing; default ~/.cache/grpo_mse/gpu_env_wheels), GPU_ENV_TORCH (2.11.0),
# GPU_ENV_TRANSFORMERS (5.17.0; e.g. the newest release to try it), GPU_CHECK_OUT (default outputs/gpu_env_check).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}"
source scripts/demo_guard.sh
no_arguments "$0" 12 "$@"
CACHE="${HOME}/.cache/grpo_mse"
ENV_DIR="${GPU_ENV_DIR:-${CACHE}/gpu_env}"
WHEELS="${GPU_ENV_WHEELS:-${CACHE}/gpu_env_wheels}"
TORCH="${GPU_ENV_TORCH:-2.11.0}"
TRANSFORMERS="${GPU_ENV_TRANSFORMERS:-5.17.0}"
ABSENT=(datasets vllm verl trl ray math_verify wandb)
PACKAGES=("torch==${TORCH}" "transformers==${TRANSFORMERS}" numpy pandas pyarrow matplotlib tqdm safetensors
          tokenizers scipy hypothesis pytest)

is_312() { [[ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2> /dev/null)" == 3.12 ]]; }
if [[ -n "${GPU_ENV_PYTHON:-}" ]]; then
  is_312 "${GPU_ENV_PYTHON}" || fail "GPU_ENV_PYTHON=${GPU_ENV_PYTHON} is not a Python 3.12"
  PYTHON312="${GPU_ENV_PYTHON}"
else
  PYTHON312=""
  for candidate in "$(command -v python3.12 || true)" "${HOME}"/.pyenv/versions/3.12.*/bin/python; do
    if [[ -x "${candidate}" ]] && is_312 "${candidate}"; then PYTHON312="${candidate}"; break; fi
  done
  [[ -n "${PYTHON312}" ]] || fail "no Python 3.12 found: set GPU_ENV_PYTHON to one"
fi

start=$(date +%s)
STAMP="${ENV_DIR}/.grpo_mse_packages"
if [[ ! -f "${STAMP}" || "$(cat "${STAMP}")" != "${PACKAGES[*]}" ]]; then
  [[ -x "${ENV_DIR}/bin/python" ]] || "${PYTHON312}" -m venv "${ENV_DIR}"
  mkdir -p "${WHEELS}"
  echo "downloading into ${WHEELS} (wheels already there are reused): ${PACKAGES[*]}"
  "${ENV_DIR}/bin/python" -m pip download --quiet --dest "${WHEELS}" --only-binary=:all: "${PACKAGES[@]}"
  echo "installing from ${WHEELS} only"
  "${ENV_DIR}/bin/python" -m pip install --quiet --no-index --find-links "${WHEELS}" "${PACKAGES[@]}"
  echo "${PACKAGES[*]}" > "${STAMP}"
  echo "environment ready in $(( $(date +%s) - start )) s: ${ENV_DIR}"
fi
for module in "${ABSENT[@]}"; do
  if "${ENV_DIR}/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${module}') is None)"; then
    fail "${ENV_DIR} has ${module}, which the GPU machine lacks; remove it (pip uninstall) or the folder"
  fi
done
"${ENV_DIR}/bin/python" -c "import torch, transformers; print('torch', torch.__version__, '| transformers', \
transformers.__version__)"
GPU_CHECK_EMULATE=cpu GPU_CHECK_PYTHON="${ENV_DIR}/bin/python" GPU_CHECK_OUT="${GPU_CHECK_OUT:-outputs/gpu_env_check}" \
  bash scripts/gpu_check.sh
