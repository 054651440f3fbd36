#!/usr/bin/env bash
# GRPO training on VERL at a fixed sampling budget of BUDGET (default 1024) sequences per step.
#
#   MODEL=Qwen/Qwen2.5-1.5B-Instruct DATA_DIR=data/gsm8k GROUP_SIZE=32 bash Policy_Optimization/grpo_train.sh
#   DRY_RUN=1 MODEL=... DATA_DIR=... bash Policy_Optimization/grpo_train.sh   # compose + validate, no GPU
#   bash Policy_Optimization/grpo_train.sh trainer.total_epochs=2 ...           # extra Hydra overrides
#
# Every setting below can be edited here or given as an environment variable of the same name.
# DRY_RUN=1 prints the command and has VERL compose and validate the configuration
# (python -m verl.trainer.main_ppo --cfg job); DRY_RUN=print only prints it.
# Multi-node (NNODES > 1): start a Ray cluster first (head: `ray start --head --port=6379`,
# every other node: `ray start --address=<head-ip>:6379`), then run this script on the head node;
# VERL's ray.init() joins the running cluster. See docs/training.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
PLACEHOLDER="<SET_ME>"

# ============================== USER CONFIGURATION ==============================
# Paths
BASE_DIR="${BASE_DIR:-${REPO_ROOT}/outputs}"          # caches, checkpoints and logs go under here
MODEL="${MODEL:-${PLACEHOLDER}}"                      # hub id or local path, e.g. Qwen/Qwen2.5-1.5B-Instruct
DATA_DIR="${DATA_DIR:-${PLACEHOLDER}}"                # folder written by Policy_Optimization/prepare_data.py
TRAIN_FILE="${TRAIN_FILE:-${DATA_DIR}/train.parquet}"
VAL_FILE="${VAL_FILE:-${DATA_DIR}/test.parquet}"
# Hardware
GPUS="${GPUS:-8}"                                     # GPUs per node
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-}"      # empty: leave the visible devices alone
GPU_UTIL="${GPU_UTIL:-0.6}"                           # vLLM gpu_memory_utilization
NNODES="${NNODES:-1}"
ROLLOUT_TP="${ROLLOUT_TP:-1}"                         # vLLM tensor parallel size
MICRO_BSZ="${MICRO_BSZ:-8}"                           # micro batch per GPU (update and log-prob passes)
# Environment
PYTHON_BIN="${PYTHON_BIN:-python}"
CONDA_ROOT="${CONDA_ROOT:-}"                          # set both to activate a conda environment
ENV_NAME="${ENV_NAME:-}"
# Experiment
GROUP_SIZE="${GROUP_SIZE:-32}"                        # K = rollout.n
BUDGET="${BUDGET:-1024}"                              # sequences per step (the paper: 1024)
SEED="${SEED:-}"                                      # empty: VERL's default seeds
RUN_TAG="${RUN_TAG:-grpo}"
PROJECT_NAME="${PROJECT_NAME:-demystifying_grpo}"
EXPERIMENT_NAME="${EXPERIMENT_NAME:-${RUN_TAG}_$(basename "${MODEL}")_K${GROUP_SIZE}${SEED:+_seed${SEED}}}"
WANDB_MODE="${WANDB_MODE:-online}"                    # online | offline | disabled
LOGGERS="${LOGGERS:-[console,wandb]}"
DRY_RUN="${DRY_RUN:-0}"                               # 0 | 1 | print
# ================================================================================

die() { echo "grpo_train.sh: error: $*" >&2; exit 2; }

for name in BASE_DIR MODEL DATA_DIR TRAIN_FILE VAL_FILE GPUS GPU_UTIL NNODES PYTHON_BIN GROUP_SIZE \
            RUN_TAG EXPERIMENT_NAME PROJECT_NAME; do
  value="${!name}"
  if [[ -z "${value}" || "${value}" == *"${PLACEHOLDER}"* ]]; then
    die "${name} is not set: edit the USER CONFIGURATION section of $(basename "$0") or run with ${name}=..."
  fi
done

is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
for name in GPUS NNODES GROUP_SIZE BUDGET ROLLOUT_TP MICRO_BSZ; do
  is_int "${!name}" || die "${name}=${!name} must be a positive integer"
done
[[ -z "${SEED}" || "${SEED}" =~ ^[0-9]+$ ]] || die "SEED=${SEED} must be a non-negative integer"
[[ "${GPU_UTIL}" =~ ^(0?\.[0-9]+|1(\.0*)?)$ ]] || die "GPU_UTIL=${GPU_UTIL} must be in (0, 1]"
if [[ -n "${CUDA_VISIBLE_DEVICES}" ]]; then
  IFS=',' read -r -a _devices <<< "${CUDA_VISIBLE_DEVICES}"
  [[ "${#_devices[@]}" -eq "${GPUS}" ]] \
    || die "GPUS=${GPUS} but CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES} lists ${#_devices[@]} devices"
  export CUDA_VISIBLE_DEVICES
fi

# Fixed budget: BUDGET sequences per step = (BUDGET/G prompts) x G samples.
G="${GROUP_SIZE}"
check_divides() {  # check_divides <what> <numerator>
  (( $2 % G == 0 )) || die "GROUP_SIZE=${G} must divide $2 ($1 = $2/G); choose a K that divides it"
}
check_divides "train_batch_size" "${BUDGET}"
(( BUDGET % 8 == 0 )) || die "BUDGET=${BUDGET} must be a multiple of 8"
check_divides "ppo_mini_batch_size" $(( BUDGET / 4 ))
check_divides "total_epochs" $(( BUDGET / 8 ))
TRAIN_BATCH_SIZE=$(( BUDGET / G ))
PPO_MINI_BATCH_SIZE=$(( BUDGET / 4 / G ))
TOTAL_EPOCHS=$(( BUDGET / 8 / G ))

for f in "${TRAIN_FILE}" "${VAL_FILE}"; do
  [[ -f "${f}" ]] || die "data file ${f} not found (run Policy_Optimization/prepare_data.py first)"
done
abspath() { if [[ "$1" == /* ]]; then echo "$1"; else echo "${PWD}/${1#./}"; fi; }  # Ray workers may run elsewhere
TRAIN_FILE="$(abspath "${TRAIN_FILE}")"
VAL_FILE="$(abspath "${VAL_FILE}")"
[[ -e "${MODEL}" ]] && MODEL="$(abspath "${MODEL}")"
BASE_DIR="$(abspath "${BASE_DIR}")"
[[ "${WANDB_MODE}" =~ ^(online|offline|disabled)$ ]] || die "WANDB_MODE=${WANDB_MODE}: use online, offline or disabled"

if [[ -n "${CONDA_ROOT}" && -n "${ENV_NAME}" ]]; then
  set +u  # conda's activation scripts read unset variables
  # shellcheck disable=SC1091
  source "${CONDA_ROOT}/etc/profile.d/conda.sh"
  conda activate "${ENV_NAME}"
  set -u
fi
command -v "${PYTHON_BIN}" > /dev/null || die "PYTHON_BIN=${PYTHON_BIN} not found"

# Caches and logs under BASE_DIR.
export HF_HOME="${HF_HOME:-${BASE_DIR}/hf_cache}"
export HF_DATASETS_CACHE="${HF_DATASETS_CACHE:-${HF_HOME}/datasets}"
export WANDB_DIR="${WANDB_DIR:-${BASE_DIR}/wandb}"
export WANDB_CACHE_DIR="${WANDB_CACHE_DIR:-${BASE_DIR}/wandb_cache}"
export WANDB_CONFIG_DIR="${WANDB_CONFIG_DIR:-${BASE_DIR}/wandb_config}"
export WANDB_DATA_DIR="${WANDB_DATA_DIR:-${BASE_DIR}/wandb_data}"
export WANDB_MODE
export PYTHONPATH="${REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
LOG_FILE="${LOG_FILE:-${BASE_DIR}/logs/${EXPERIMENT_NAME}.log}"
CKPT_DIR="${CKPT_DIR:-${BASE_DIR}/checkpoints/${PROJECT_NAME}/${EXPERIMENT_NAME}}"

OVERRIDES=(
  algorithm.adv_estimator=grpo
  algorithm.use_kl_in_reward=False
  data.train_files="${TRAIN_FILE}"
  data.val_files="${VAL_FILE}"
  data.train_batch_size="${TRAIN_BATCH_SIZE}"
  data.max_prompt_length=512
  data.max_response_length=512
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="${MODEL}"
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size="${PPO_MINI_BATCH_SIZE}"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="${MICRO_BSZ}"
  actor_rollout_ref.actor.ppo_epochs=1
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.policy_loss.loss_mode=vanilla
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n="${G}"
  actor_rollout_ref.rollout.gpu_memory_utilization="${GPU_UTIL}"
  actor_rollout_ref.rollout.tensor_model_parallel_size="${ROLLOUT_TP}"
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="${MICRO_BSZ}"
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="${MICRO_BSZ}"
  reward.custom_reward_function.path="${SCRIPT_DIR}/reward.py"
  reward.custom_reward_function.name=compute_score
  trainer.critic_warmup=0
  trainer.logger="${LOGGERS}"
  trainer.project_name="${PROJECT_NAME}"
  trainer.experiment_name="${EXPERIMENT_NAME}"
  trainer.n_gpus_per_node="${GPUS}"
  trainer.nnodes="${NNODES}"
  trainer.default_local_dir="${CKPT_DIR}"
  trainer.save_freq=100
  trainer.test_freq=5
  trainer.total_epochs="${TOTAL_EPOCHS}"
)
if [[ -n "${SEED}" ]]; then
  OVERRIDES+=(data.seed="${SEED}" actor_rollout_ref.rollout.seed="${SEED}")
fi
OVERRIDES+=("$@")  # user overrides come last, so they win

mask() {  # print arguments with secret-looking values replaced
  local arg out=()
  for arg in "$@"; do
    if [[ "${arg}" =~ ^([^=]*(api_key|API_KEY|token|TOKEN|secret|SECRET|password|PASSWORD)[^=]*)= ]]; then
      arg="${BASH_REMATCH[1]}=****"
    fi
    out+=("$(printf '%q' "${arg}")")
  done
  echo "${out[*]}"
}

HEADER="[grpo_train] EXPERIMENT_NAME=${EXPERIMENT_NAME} GROUP_SIZE=${G} SEED=${SEED:-default} BUDGET=${BUDGET}
[grpo_train] train_batch_size=${TRAIN_BATCH_SIZE} ppo_mini_batch_size=${PPO_MINI_BATCH_SIZE} total_epochs=${TOTAL_EPOCHS}
[grpo_train] MODEL=${MODEL} NNODES=${NNODES} GPUS=${GPUS} WANDB_MODE=${WANDB_MODE} \
WANDB_API_KEY=$([[ -n "${WANDB_API_KEY:-}" ]] && echo '****' || echo unset) HF_HOME=${HF_HOME}
[grpo_train] command: $(mask "${PYTHON_BIN}" -m verl.trainer.main_ppo "${OVERRIDES[@]}")"
echo "${HEADER}"

case "${DRY_RUN}" in
  print) exit 0 ;;
  1|true|yes) exec "${PYTHON_BIN}" -m grpo_mse.training.verl_launch "${OVERRIDES[@]}" ;;
  0|false|no|"") ;;
  *) die "DRY_RUN=${DRY_RUN}: use 0, 1 or print" ;;
esac

if (( NNODES > 1 )); then
  ray status > /dev/null 2>&1 || die "NNODES=${NNODES} needs a running Ray cluster: see the header of this script"
fi
mkdir -p "${HF_HOME}" "${WANDB_DIR}" "${WANDB_CACHE_DIR}" "${WANDB_CONFIG_DIR}" "${WANDB_DATA_DIR}" \
         "$(dirname "${LOG_FILE}")"
echo "[grpo_train] log: ${LOG_FILE}"
echo "${HEADER}" >> "${LOG_FILE}"
"${PYTHON_BIN}" -m verl.trainer.main_ppo "${OVERRIDES[@]}" 2>&1 | tee -a "${LOG_FILE}"
