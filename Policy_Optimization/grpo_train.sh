#!/usr/bin/env bash
# GRPO training at a fixed sampling budget of BUDGET (default 1024) sequences per step.
# TRAINER=verl (default): VERL on GPUs (vLLM rollouts, FSDP actor). TRAINER=trl: TRL's GRPOTrainer on CPU.
#
#   MODEL=Qwen/Qwen2.5-1.5B-Instruct DATA_DIR=data/gsm8k GROUP_SIZE=32 bash Policy_Optimization/grpo_train.sh
#   DRY_RUN=1 MODEL=... DATA_DIR=... bash Policy_Optimization/grpo_train.sh   # compose + validate, no GPU
#   bash Policy_Optimization/grpo_train.sh trainer.total_epochs=2 ...           # extra Hydra overrides (VERL)
#   TRAINER=trl MODEL=assets/tiny_policy DATA_DIR=outputs/data/arithmetic GROUP_SIZE=8 BUDGET=256 \
#       bash Policy_Optimization/grpo_train.sh --max_steps 20                   # extra TRL flags (CPU)
#
# Every setting below can be edited here or given as an environment variable of the same name.
# DRY_RUN=1 prints the command and checks it without training (VERL: python -m verl.trainer.main_ppo
# --cfg job plus VERL's validate_config; TRL: builds the GRPOConfig); DRY_RUN=print only prints it.
# Multi-node (NNODES > 1): start a Ray cluster first (head: `ray start --head --port=6379`,
# every other node: `ray start --address=<head-ip>:6379`), then run this script on the head node;
# VERL's ray.init() joins the running cluster. See docs/training.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in  # the header above is the help
  -h|--help) awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
esac
PLACEHOLDER="<SET_ME>"

# ============================== USER CONFIGURATION ==============================
TRAINER="${TRAINER:-verl}"                            # verl (GPUs) | trl (CPU)
# Paths
REPO_DIR="${REPO_DIR:-$(cd "${SCRIPT_DIR}/.." && pwd)}"   # this repository (reward function, PYTHONPATH)
BASE="${BASE:-${BASE_DIR:-${REPO_DIR}/outputs}}"      # checkpoints/ logs/ wandb/ hydra_outputs/ (any length)
# Ray's session folder holds AF_UNIX sockets (at most 107 bytes each, ~64 of them Ray's own names), so it is a
# short per-user folder, never under BASE; vLLM's IPC sockets go under TMPDIR (left to you; checked below).
RAY_TMP="${RAY_TMP:-/tmp/ray_$(id -u)}"              # Ray's _temp_dir (sessions, object spilling), <= 40 chars
# HF_HOME, HF_HUB_CACHE, HF_TOKEN, TMPDIR: your own (not redirected); forwarded to the Ray workers when set.
MODEL="${MODEL:-${PLACEHOLDER}}"                      # hub id, local or adapter folder, GGUF file, e.g. Qwen/Qwen2.5-1.5B-Instruct
DATA_DIR="${DATA_DIR:-${PLACEHOLDER}}"                # folder written by Policy_Optimization/prepare_data.py
TRAIN_FILE="${TRAIN_FILE:-train.parquet}"             # a file name in DATA_DIR (or a path)
VAL_FILE="${VAL_FILE:-test.parquet}"
# Hardware (VERL)
GPUS="${GPUS:-8}"                                     # GPUs per node
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-}"      # empty: leave the visible devices alone
GPU_UTIL="${GPU_UTIL:-0.6}"                           # vLLM gpu_memory_utilization, in (0, 1]
NNODES="${NNODES:-1}"
ROLLOUT_TP="${ROLLOUT_TP:-1}"                         # vLLM tensor parallel size
MICRO_BSZ="${MICRO_BSZ:-8}"                           # micro batch per GPU (update and log-prob passes)
ATTN_IMPL="${ATTN_IMPL:-sdpa}"                        # actor attention: sdpa | flash_attention_2 (needs flash-attn) | eager
# Environment
PYTHON_BIN="${PYTHON_BIN:-python}"
CONDA_ROOT="${CONDA_ROOT:-}"                          # set both to activate a conda environment
ENV_NAME="${ENV_NAME:-}"
# Experiment
GROUP_SIZE="${GROUP_SIZE:-32}"                        # K = rollout.n
BUDGET="${BUDGET:-1024}"                              # sequences per step (the paper: 1024)
SEED="${SEED:-}"                                      # empty: the trainer's default seeds
ADAPTIVE_K_EVERY="${ADAPTIVE_K_EVERY:-0}"             # TRL only: re-estimate the best K every N steps (0: fixed K)
ADAPTIVE_K_LIST="${ADAPTIVE_K_LIST:-}"                # TRL adaptive K: allowed K, e.g. "2 4 8 16" (empty: powers of 2 that fit)
ADAPTIVE_K_T="${ADAPTIVE_K_T:-16}"                    # TRL adaptive K: training prompts the advisor uses
ADAPTIVE_K_M="${ADAPTIVE_K_M:-4}"                     # TRL adaptive K: the advisor's groups per prompt and K
ADAPTIVE_K_N_ORACLE="${ADAPTIVE_K_N_ORACLE:-64}"      # TRL adaptive K: samples per prompt for the advisor's V(x)
LR="${LR:-1e-6}"                                      # actor learning rate (the paper: 1e-6)
MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-512}"
MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-512}"
TEMPERATURE="${TEMPERATURE:-1.0}"                     # sampling temperature of the training rollouts (validation: greedy)
TEST_FREQ="${TEST_FREQ:-5}"                           # held-out validation every TEST_FREQ steps
REWARD_TIMEOUT="${REWARD_TIMEOUT:-5}"                 # seconds per MATH answer before it scores 0
RUN_TAG="${RUN_TAG:-grpo}"
PROJECT_NAME="${PROJECT_NAME:-demystifying_grpo}"
EXPERIMENT_NAME="${EXPERIMENT_NAME:-${RUN_TAG}_$(basename "${MODEL}" .gguf)_K${GROUP_SIZE}${SEED:+_seed${SEED}}}"
WANDB_MODE="${WANDB_MODE:-online}"                    # online | offline | disabled
LOGGERS="${LOGGERS:-[console,wandb]}"
# Checkpoints
SAVE_FREQ="${SAVE_FREQ:-100}"                         # VERL: steps between checkpoints
SAVE_CONTENTS="${SAVE_CONTENTS:-[model]}"             # VERL: [model] as the original; [model,optimizer,extra] to resume
MAX_CKPT_TO_KEEP="${MAX_CKPT_TO_KEEP:-2}"             # VERL: newest checkpoints kept per run
SAVE_MODEL="${SAVE_MODEL:-1}"                         # TRL: 1 saves the final model, 0 does not
RESUME_MODE="${RESUME_MODE:-disable}"                 # VERL: disable (a fresh run) | auto (newest checkpoint in
                                                      # CKPT_DIR) | a global_step_N folder to resume from
DRY_RUN="${DRY_RUN:-0}"                               # 0 | 1 | print
# ================================================================================

die() { echo "grpo_train.sh: error: $*" >&2; exit 2; }

# A mistyped setting (GROUPSIZE=8) would silently run the default: refuse an environment variable whose name is a
# setting's with underscores or case changed, or (names of 5+ characters) one character added, dropped, changed
# or two swapped.
SETTING_NAMES="$(sed -n 's/^\([A-Z][A-Z0-9_]*\)="\${\1:-.*/\1/p' "${BASH_SOURCE[0]}") BASE_DIR LOG_FILE CKPT_DIR
  WANDB_DIR WANDB_CACHE_DIR WANDB_CONFIG_DIR WANDB_DATA_DIR WANDB_PROJECT WANDB_ENTITY WANDB_API_KEY WANDB_BASE_URL
  HF_HOME HF_DATASETS_CACHE HF_HUB_CACHE HF_HUB_OFFLINE HF_TOKEN TRANSFORMERS_OFFLINE TMPDIR PYTHONPATH
  GRPO_REWARD_TIMEOUT GRPO_REWARD_WORKERS"
# shellcheck disable=SC2086
SETTING_NAMES=" $(echo ${SETTING_NAMES}) "  # one space between names
one_edit() {  # one_edit A B: B is A with one character added, dropped or changed, or two neighbours swapped
  local a=$1 b=$2 i
  (( ${#a} >= 5 && ${#b} >= 5 )) || return 1
  if (( ${#a} == ${#b} )); then
    for (( i = 0; i < ${#a}; i++ )); do
      [[ "${a:i:1}" == "${b:i:1}" ]] && continue
      [[ "${a:i+1}" == "${b:i+1}" ]] && return 0
      [[ "${a:i:1}" == "${b:i+1:1}" && "${a:i+1:1}" == "${b:i:1}" && "${a:i+2}" == "${b:i+2}" ]] && return 0
      return 1
    done
    return 1
  fi
  (( ${#a} < ${#b} )) && { local t=$a; a=$b; b=$t; }
  (( ${#a} == ${#b} + 1 )) || return 1
  for (( i = 0; i < ${#a}; i++ )); do
    [[ "${a:0:i}${a:i+1}" == "${b}" ]] && return 0
  done
  return 1
}
for _name in $(compgen -e); do
  [[ "${SETTING_NAMES}" == *" ${_name} "* || ! "${_name}" =~ ^[A-Za-z][A-Za-z0-9_]*$ ]] && continue
  for _known in ${SETTING_NAMES}; do
    _squashed="${_name//_/}"; _squashed="${_squashed^^}"
    if [[ "${_squashed}" == "${_known//_/}" ]] || { [[ "${_name:0:1}" == "${_known:0:1}" ]] && one_edit "${_name}" "${_known}"; }; then
      die "${_name} is not a setting of this script (did you mean ${_known}?); unset it or rename it, otherwise ${_known} keeps its default"
    fi
  done
done

case "${DRY_RUN}" in
  0|false|no|"") DRY_RUN=0 ;;
  1|true|yes) DRY_RUN=1 ;;
  print) ;;
  *) die "DRY_RUN=${DRY_RUN}: use 0, 1 or print" ;;
esac
[[ "${TRAINER}" =~ ^(verl|trl)$ ]] || die "TRAINER=${TRAINER}: use verl or trl"
for name in RUN_TAG PROJECT_NAME EXPERIMENT_NAME; do  # they name files and folders: a '/' would nest them
  [[ "${!name}" != */* ]] || die "${name}=${!name} holds a '/'; it names the run's log and checkpoint folder"
done

required=(BASE MODEL TRAIN_FILE VAL_FILE PYTHON_BIN GROUP_SIZE RUN_TAG EXPERIMENT_NAME PROJECT_NAME REPO_DIR)
[[ "${TRAIN_FILE}" == /* && "${VAL_FILE}" == /* ]] || required+=(DATA_DIR)
for name in "${required[@]}"; do
  value="${!name}"
  if [[ -z "${value}" || "${value}" == *"${PLACEHOLDER}"* ]]; then
    die "${name} is not set: edit the USER CONFIGURATION section of $(basename "$0") or run with ${name}=..."
  fi
done

is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_number() { [[ "$1" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]]; }
for name in GPUS NNODES GROUP_SIZE BUDGET ROLLOUT_TP MICRO_BSZ MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH TEST_FREQ \
            SAVE_FREQ MAX_CKPT_TO_KEEP; do
  is_int "${!name}" || die "${name}=${!name} must be a positive integer"
done
[[ -z "${SEED}" || "${SEED}" =~ ^[0-9]+$ ]] || die "SEED=${SEED} must be a non-negative integer"
[[ "${ADAPTIVE_K_EVERY}" =~ ^[0-9]+$ ]] || die "ADAPTIVE_K_EVERY=${ADAPTIVE_K_EVERY} must be a whole number of steps (0: a fixed K)"
ADAPTIVE_K_EVERY=$(( 10#${ADAPTIVE_K_EVERY} ))
if (( ADAPTIVE_K_EVERY > 0 )); then
  [[ "${TRAINER}" == trl ]] || die "ADAPTIVE_K_EVERY=${ADAPTIVE_K_EVERY}: adaptive K needs TRAINER=trl (VERL keeps one rollout.n for a run)"
  for name in ADAPTIVE_K_T ADAPTIVE_K_M ADAPTIVE_K_N_ORACLE; do
    is_int "${!name}" || die "${name}=${!name} must be a positive integer"
  done
  for k in ${ADAPTIVE_K_LIST}; do is_int "${k}" || die "ADAPTIVE_K_LIST=${ADAPTIVE_K_LIST}: ${k} is not a positive integer"; done
elif [[ -n "${ADAPTIVE_K_LIST}" ]]; then
  die "ADAPTIVE_K_LIST=${ADAPTIVE_K_LIST} needs ADAPTIVE_K_EVERY=N (N > 0: adaptive K on)"
fi
in_unit() { awk -v x="$1" 'BEGIN { exit !(x + 0 > 0 && x + 0 <= 1) }'; }
{ is_number "${GPU_UTIL}" && in_unit "${GPU_UTIL}"; } || die "GPU_UTIL=${GPU_UTIL} must be in (0, 1]"
positive() { is_number "$1" && awk -v x="$1" 'BEGIN { exit !(x + 0 > 0) }'; }
{ positive "${LR}" && awk -v x="${LR}" 'BEGIN { exit !(x + 0 < 1) }'; } \
  || die "LR=${LR} must be a positive number below 1 (the paper: 1e-6)"
positive "${TEMPERATURE}" || die "TEMPERATURE=${TEMPERATURE} must be a positive number (1.0: the model's own distribution)"
positive "${REWARD_TIMEOUT}" || die "REWARD_TIMEOUT=${REWARD_TIMEOUT} must be a positive number of seconds"
[[ "${ATTN_IMPL}" =~ ^(sdpa|flash_attention_2|flash_attention_3|eager)$ ]] \
  || die "ATTN_IMPL=${ATTN_IMPL}: use sdpa, flash_attention_2, flash_attention_3 or eager"
[[ "${SAVE_CONTENTS}" =~ ^\[[a-z_,\'\ ]+\]$ ]] || die "SAVE_CONTENTS=${SAVE_CONTENTS}: a list such as [model]"
[[ "${SAVE_MODEL}" =~ ^[01]$ ]] || die "SAVE_MODEL=${SAVE_MODEL}: use 1 or 0"
[[ "${WANDB_MODE}" =~ ^(online|offline|disabled)$ ]] || die "WANDB_MODE=${WANDB_MODE}: use online, offline or disabled"
# LOGGERS: a list of known backends (TRL: console, wandb; VERL's Tracking also mlflow, tensorboard, ...), checked
# here so that a typo is refused before any folder or log is made (trl_train would refuse it only after)
[[ "${TRAINER}" == trl ]] && _known="console wandb" || _known="console wandb mlflow swanlab vemlp_wandb tensorboard clearml trackio file"
for _logger in $(tr ',[]' '   ' <<< "${LOGGERS}"); do
  [[ " ${_known} " == *" ${_logger} "* ]] || die "LOGGERS=${LOGGERS}: unknown ${_logger}; use ${_known// /, } (TRAINER=${TRAINER})"
done
# an online wandb run without a key fails only after the model loaded (a wandb traceback): refuse it here
_wandb_host="${WANDB_BASE_URL:-https://api.wandb.ai}"; _wandb_host="${_wandb_host#*://}"; _wandb_host="${_wandb_host%%[:/]*}"
if [[ "${DRY_RUN}" == 0 && "${WANDB_MODE}" == online && "${LOGGERS}" == *wandb* && -z "${WANDB_API_KEY:-}" ]] \
    && ! grep -qsF "${_wandb_host}" "${NETRC:-${HOME:-/nonexistent}/.netrc}"; then
  die "LOGGERS=${LOGGERS} with WANDB_MODE=online but no wandb key (WANDB_API_KEY unset, none in ~/.netrc): run \`wandb login\`, or set WANDB_MODE=offline, or LOGGERS=[console]"
fi
[[ "${RAY_TMP}" == /* && ${#RAY_TMP} -le 40 ]] \
  || die "RAY_TMP=${RAY_TMP} must be an absolute path of at most 40 characters (Ray's socket paths under it are limited to 107 bytes)"
[[ -z "${TMPDIR:-}" || ${#TMPDIR} -le 60 ]] \
  || die "TMPDIR=${TMPDIR} is ${#TMPDIR} characters: vLLM's IPC sockets under it are limited to 107 bytes; unset it or use a path of at most 60"
if [[ -n "${CUDA_VISIBLE_DEVICES}" ]]; then
  IFS=',' read -r -a _devices <<< "${CUDA_VISIBLE_DEVICES}"
  [[ "${#_devices[@]}" -eq "${GPUS}" ]] \
    || die "GPUS=${GPUS} but CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES} lists ${#_devices[@]} devices"
  export CUDA_VISIBLE_DEVICES
fi

# User overrides must not contradict the launcher's own K and budget.
for arg in "$@"; do
  key="${arg%%=*}"; key="${key#++}"; key="${key#+}"
  case "${key}" in
    actor_rollout_ref.rollout.n|data.train_batch_size|actor_rollout_ref.actor.ppo_mini_batch_size|--group_size|--budget)
      die "override ${arg} contradicts GROUP_SIZE/BUDGET: set GROUP_SIZE=... and BUDGET=... instead" ;;
    data.seed|actor_rollout_ref.rollout.seed|--seed|actor_rollout_ref.actor.optim.lr|--lr)  # the run's recorded identity
      die "override ${arg} contradicts SEED/LR (the settings recorded in the log): set SEED=... and LR=... instead" ;;
  esac
done

if [[ -n "${CONDA_ROOT}" && -n "${ENV_NAME}" ]]; then
  set +u  # conda's activation scripts read unset variables
  # shellcheck disable=SC1091
  source "${CONDA_ROOT}/etc/profile.d/conda.sh"
  conda activate "${ENV_NAME}"
  set -u
fi
command -v "${PYTHON_BIN}" > /dev/null || die "PYTHON_BIN=${PYTHON_BIN} not found"
[[ -f "${REPO_DIR}/Policy_Optimization/reward.py" ]] || die "REPO_DIR=${REPO_DIR} is not this repository (no Policy_Optimization/reward.py)"
case ":${PYTHONPATH:-}:" in
  *":${REPO_DIR}:"*) ;;
  *) export PYTHONPATH="${REPO_DIR}${PYTHONPATH:+:${PYTHONPATH}}" ;;
esac

# Fixed budget: BUDGET sequences per step = (BUDGET/K prompts) x K samples (grpo_mse/training/budget.py).
G="${GROUP_SIZE}"
SETTINGS="$("${PYTHON_BIN}" -m grpo_mse.training.budget "${G}" "${BUDGET}")" || exit 2
read -r TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE TOTAL_EPOCHS <<< "$(sed 's/[A-Z_]*=//g' <<< "${SETTINGS}")"

abspath() { if [[ "$1" == /* ]]; then echo "$1"; else echo "${PWD}/${1#./}"; fi; }  # Ray workers may run elsewhere
data_file() {  # data_file NAME VALUE: a name in DATA_DIR (as the original), else a path
  if [[ "$2" != /* && -n "${DATA_DIR}" && "${DATA_DIR}" != "${PLACEHOLDER}" && -f "${DATA_DIR}/$2" ]]; then
    abspath "${DATA_DIR}/$2"
  elif [[ -f "$2" ]]; then
    abspath "$2"
  else
    die "data file $1=$2 not found (looked in DATA_DIR=${DATA_DIR} and as a path; run Policy_Optimization/prepare_data.py first)"
  fi
}
TRAIN_FILE="$(data_file TRAIN_FILE "${TRAIN_FILE}")"
VAL_FILE="$(data_file VAL_FILE "${VAL_FILE}")"
MODEL_PATH="${MODEL}"  # what the trainer loads: MODEL, or for VERL a GGUF file's converted HF folder
if [[ -e "${MODEL}" ]]; then
  MODEL="$(abspath "${MODEL}")"
  MODEL_PATH="${MODEL}"
  if [[ "${MODEL}" == *.gguf || ( -d "${MODEL}" && ! -f "${MODEL}/config.json" \
        && ( -f "${MODEL}/adapter_config.json" || -n "$(compgen -G "${MODEL}/*.gguf")" ) ) ]]; then
    # A GGUF file or a LoRA adapter folder: TRL converts or merges it itself (cached); VERL needs the folder,
    # converted or merged once here, cached by the files' sha256
    if [[ "${TRAINER}" == verl ]]; then
      MODEL_PATH="$("${PYTHON_BIN}" -m grpo_mse.training.model_folder "${MODEL}")" || exit 2
    fi
  else
    [[ -f "${MODEL}/config.json" ]] || die "MODEL=${MODEL} is not a model folder (no config.json), a LoRA adapter folder nor a GGUF file"
  fi
elif [[ "${MODEL}" == /* || "${MODEL}" == .* || "${MODEL}" == "~"* || "${MODEL}" == */*/* ]]; then
  die "MODEL=${MODEL}: no such local folder (a hub id looks like org/name)"
elif [[ "${MODEL}" == */* ]] && compgen -G "${MODEL%%/*}/*/config.json" > /dev/null; then  # mistyped, not a hub id
  models=(); for config in "${MODEL%%/*}"/*/config.json; do models+=("$(dirname "${config}")"); done
  die "MODEL=${MODEL}: no such local folder (${MODEL%%/*}/ is a local folder of models: ${models[*]}), so no hub download is tried"
fi
BASE="$(abspath "${BASE}")"
_existing="${BASE}"  # the deepest part of BASE that exists must be a writable folder (else mkdir fails in 5 lines)
while [[ ! -e "${_existing}" ]]; do _existing="$(dirname "${_existing}")"; done
[[ -d "${_existing}" ]] || die "BASE=${BASE}: ${_existing} is a file, not a folder"
[[ -w "${_existing}" ]] || die "BASE=${BASE}: ${_existing} is not writable"

case "${RESUME_MODE}" in  # VERL's own default (auto) would silently resume a rerun, with a fresh optimiser
  disable|auto) RESUME_ARGS=(trainer.resume_mode="${RESUME_MODE}") ;;
  *) [[ -d "${RESUME_MODE}" && "$(basename "${RESUME_MODE}")" =~ ^global_step_[0-9]+$ ]] \
       || die "RESUME_MODE=${RESUME_MODE}: use disable, auto or an existing global_step_N checkpoint folder"
     RESUME_ARGS=(trainer.resume_mode=resume_path trainer.resume_from_path="$(abspath "${RESUME_MODE}")") ;;
esac

# wandb files and logs under BASE; Hugging Face caches and TMPDIR are the user's; forwarded to Ray workers below.
export WANDB_DIR="${WANDB_DIR:-${BASE}/wandb}"
export WANDB_CACHE_DIR="${WANDB_CACHE_DIR:-${BASE}/wandb_cache}"
export WANDB_CONFIG_DIR="${WANDB_CONFIG_DIR:-${BASE}/wandb_config}"
export WANDB_DATA_DIR="${WANDB_DATA_DIR:-${BASE}/wandb_data}"
export WANDB_MODE
export GRPO_REWARD_TIMEOUT="${REWARD_TIMEOUT}"
FORWARD_ENV=(WANDB_MODE WANDB_DIR WANDB_CACHE_DIR WANDB_CONFIG_DIR WANDB_DATA_DIR WANDB_PROJECT WANDB_ENTITY
             HF_HOME HF_DATASETS_CACHE HF_HUB_CACHE HF_HUB_OFFLINE TRANSFORMERS_OFFLINE TMPDIR PYTHONPATH
             GRPO_REWARD_TIMEOUT GRPO_REWARD_WORKERS)  # never secrets: main_ppo prints these
# One log and one checkpoint folder per run: the name holds K and the seed (EXPERIMENT_NAME), the budget and the
# learning rate; the log adds the start time, and an existing log is never appended to (checked below).
RUN_ID="${EXPERIMENT_NAME}_B${BUDGET}_lr${LR}"
LOG_FILE="${LOG_FILE:-${BASE}/logs/${RUN_ID}_$(date +%Y%m%d_%H%M%S).log}"
CKPT_DIR="${CKPT_DIR:-${BASE}/checkpoints/${PROJECT_NAME}/${RUN_ID}}"
for name in MODEL MODEL_PATH TRAIN_FILE VAL_FILE CKPT_DIR BASE EXPERIMENT_NAME REPO_DIR; do  # VERL: paths go to Hydra quoted
  [[ "${TRAINER}" != verl || ( "${!name}" != *"'"* && "${!name}" != *'\'* ) ]] || die "${name}=${!name}: quotes and backslashes cannot be passed to Hydra; rename it"
done
hydra_value() { printf "'%s'" "$2"; }  # a quoted Hydra string: a comma or '=' in a path is not Hydra syntax
REWARD_PATH="${REPO_DIR}/Policy_Optimization/reward.py"

case "${ATTN_IMPL}" in  # VERL's remove-padding packs sequences and needs flash-attn's varlen kernels
  flash_attention_*) REMOVE_PADDING=True ;;
  *) REMOVE_PADDING=False ;;
esac

if [[ "${TRAINER}" == "verl" ]]; then
  COMMAND=("${PYTHON_BIN}" -m verl.trainer.main_ppo
    algorithm.adv_estimator=grpo
    algorithm.use_kl_in_reward=False
    data.train_files="$(hydra_value TRAIN_FILE "${TRAIN_FILE}")"
    data.val_files="$(hydra_value VAL_FILE "${VAL_FILE}")"
    data.train_batch_size="${TRAIN_BATCH_SIZE}"
    data.max_prompt_length="${MAX_PROMPT_LENGTH}"
    data.max_response_length="${MAX_RESPONSE_LENGTH}"
    data.filter_overlong_prompts=True
    data.truncation=error
    actor_rollout_ref.model.path="$(hydra_value MODEL "${MODEL_PATH}")"
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.model.use_remove_padding="${REMOVE_PADDING}"
    +actor_rollout_ref.model.override_config.attn_implementation="${ATTN_IMPL}"
    actor_rollout_ref.actor.optim.lr="${LR}"
    actor_rollout_ref.actor.ppo_mini_batch_size="${PPO_MINI_BATCH_SIZE}"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="${MICRO_BSZ}"
    actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.policy_loss.loss_mode=vanilla
    actor_rollout_ref.actor.checkpoint.save_contents="${SAVE_CONTENTS}"
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n="${G}"
    actor_rollout_ref.rollout.temperature="${TEMPERATURE}"
    actor_rollout_ref.rollout.gpu_memory_utilization="${GPU_UTIL}"
    actor_rollout_ref.rollout.tensor_model_parallel_size="${ROLLOUT_TP}"
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="${MICRO_BSZ}"
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="${MICRO_BSZ}"
    reward.custom_reward_function.path="$(hydra_value REWARD_PATH "${REWARD_PATH}")"
    reward.custom_reward_function.name=compute_score
    trainer.critic_warmup=0
    trainer.logger="${LOGGERS}"
    trainer.project_name="${PROJECT_NAME}"
    trainer.experiment_name="${EXPERIMENT_NAME}"
    trainer.n_gpus_per_node="${GPUS}"
    trainer.nnodes="${NNODES}"
    trainer.default_local_dir="$(hydra_value CKPT_DIR "${CKPT_DIR}")"
    trainer.save_freq="${SAVE_FREQ}"
    trainer.max_actor_ckpt_to_keep="${MAX_CKPT_TO_KEEP}"
    trainer.test_freq="${TEST_FREQ}"
    trainer.total_epochs="${TOTAL_EPOCHS}"
    "${RESUME_ARGS[@]}"
    +ray_kwargs.ray_init._temp_dir="${RAY_TMP}"
    hydra.run.dir="$(hydra_value BASE "${BASE}/hydra_outputs/${EXPERIMENT_NAME}")"
  )
  for name in "${FORWARD_ENV[@]}"; do
    value="${!name:-}"
    [[ -z "${value}" ]] && continue
    [[ "${value}" != *"'"* && "${value}" != *'\'* ]] || die "${name}=${value}: quotes and backslashes cannot be forwarded to Ray"
    COMMAND+=("+ray_kwargs.ray_init.runtime_env.env_vars.${name}='${value}'")
  done
  if [[ -n "${SEED}" ]]; then
    COMMAND+=(data.seed="${SEED}" actor_rollout_ref.rollout.seed="${SEED}")
  fi
else
  COMMAND=("${PYTHON_BIN}" -m grpo_mse.training.trl_train
    --model "${MODEL}" --train_file "${TRAIN_FILE}" --val_file "${VAL_FILE}"
    --group_size "${G}" --budget "${BUDGET}" --seed "${SEED:-0}" --lr "${LR}"
    --max_prompt_length "${MAX_PROMPT_LENGTH}" --max_response_length "${MAX_RESPONSE_LENGTH}"
    --temperature "${TEMPERATURE}" --test_freq "${TEST_FREQ}" --reward_path "${REWARD_PATH}" --reward_name compute_score
    --project_name "${PROJECT_NAME}" --experiment_name "${EXPERIMENT_NAME}" --loggers "${LOGGERS}"
    --output_dir "${CKPT_DIR}" "$([[ "${SAVE_MODEL}" == 1 ]] && echo --save_model || echo --no-save_model)"
  )
  if (( ADAPTIVE_K_EVERY > 0 )); then  # a fixed-K run's command is unchanged
    COMMAND+=(--adaptive_k_every "${ADAPTIVE_K_EVERY}" --adaptive_k_T "${ADAPTIVE_K_T}" --adaptive_k_M "${ADAPTIVE_K_M}"
      --adaptive_k_n_oracle "${ADAPTIVE_K_N_ORACLE}")
    # shellcheck disable=SC2206
    [[ -z "${ADAPTIVE_K_LIST}" ]] || COMMAND+=(--adaptive_k_list ${ADAPTIVE_K_LIST})
  fi
fi
COMMAND+=("$@")  # user overrides come last, so they win

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

# the settings line is the run's identity for the collector (grpo_mse/training/run_identity.py); names are labels
HEADER="[grpo_train] TRAINER=${TRAINER} EXPERIMENT_NAME=${EXPERIMENT_NAME} GROUP_SIZE=${G} SEED=${SEED:-default} BUDGET=${BUDGET}
[grpo_train] settings: TRAINER=${TRAINER} GROUP_SIZE=${G} SEED=${SEED:-default} BUDGET=${BUDGET} LR=${LR}
[grpo_train] train_batch_size=${TRAIN_BATCH_SIZE} ppo_mini_batch_size=${PPO_MINI_BATCH_SIZE} total_epochs=${TOTAL_EPOCHS}
[grpo_train] MODEL=${MODEL} NNODES=${NNODES} GPUS=${GPUS} WANDB_MODE=${WANDB_MODE} \
WANDB_API_KEY=$([[ -n "${WANDB_API_KEY:-}" ]] && echo '****' || echo unset) HF_HOME=${HF_HOME:-default}
[grpo_train] command: $(mask "${COMMAND[@]}")"
echo "${HEADER}"
if [[ "${TRAINER}" == "verl" ]]; then
  shopt -s nullglob; checkpoints=("${CKPT_DIR}"/global_step_*/); shopt -u nullglob
  steps=${#checkpoints[@]}
  if (( steps > 0 )) && [[ "${RESUME_MODE}" == disable ]]; then
    echo "[grpo_train] ${CKPT_DIR} holds ${steps} checkpoint(s): RESUME_MODE=disable starts a fresh run (they may be overwritten); RESUME_MODE=auto resumes the newest"
  elif (( steps > 0 )) && [[ "${RESUME_MODE}" == auto && "${SAVE_CONTENTS}" != *optimizer* ]]; then
    echo "[grpo_train] RESUME_MODE=auto resumes the newest checkpoint in ${CKPT_DIR}; SAVE_CONTENTS=${SAVE_CONTENTS} has no optimizer state, so Adam restarts from zero"
  fi
fi

case "${DRY_RUN}" in
  print) exit 0 ;;
  1) if [[ "${TRAINER}" == "verl" ]]; then
       exec "${PYTHON_BIN}" -m grpo_mse.training.verl_launch "${COMMAND[@]:3}"
     else
       exec "${COMMAND[@]}" --dry_run
     fi ;;
esac

if [[ "${TRAINER}" == "verl" ]] && (( NNODES > 1 )); then
  ray status > /dev/null 2>&1 || die "NNODES=${NNODES} needs a running Ray cluster: see the header of this script"
fi
[[ ! -e "${LOG_FILE}" ]] || die "LOG_FILE=${LOG_FILE} exists: a log holds one run; choose another name or remove it"
if [[ "${TRAINER}" == "trl" && "${SAVE_MODEL}" == 1 && -d "${CKPT_DIR}" && -n "$(ls -A "${CKPT_DIR}")" ]]; then
  die "CKPT_DIR=${CKPT_DIR} already holds a model: set EXPERIMENT_NAME or CKPT_DIR for this run, or remove it"
fi
if [[ "${TRAINER}" == "trl" ]]; then  # its flags and paths (yours included), before any folder or log is made
  "${COMMAND[@]}" --check_only || exit $?
fi
mkdir -p "${WANDB_DIR}" "${WANDB_CACHE_DIR}" "${WANDB_CONFIG_DIR}" "${WANDB_DATA_DIR}" "$(dirname "${LOG_FILE}")"
if [[ "${TRAINER}" == "verl" ]]; then
  mkdir -p "${RAY_TMP}" && chmod 700 "${RAY_TMP}"
fi
echo "[grpo_train] log: ${LOG_FILE}"
( set -o noclobber; echo "${HEADER}" > "${LOG_FILE}" ) 2> /dev/null \
  || die "LOG_FILE=${LOG_FILE} exists or cannot be written: a log holds one run"
# The end line records how the run ended (the collector's completeness): exit 0 completed, 130/143 interrupted.
end_line() {  # end_line STATUS REASON: to the log and the terminal
  local last
  last="$(grep -aoE '(^|[^[:alnum:]_/@.-])step:[0-9]+ - ' "${LOG_FILE}" | tail -n 1 | grep -oE '[0-9]+' || true)"
  echo "[grpo_train] end: exit=$1 reason=$2 steps=${last:-none}" | tee -a "${LOG_FILE}"
}
interrupted() {  # Ctrl-C or SIGTERM: say so in the log, exit 128+N
  trap - INT TERM
  end_line "$1" interrupted
  echo "grpo_train.sh: error: interrupted (signal $(( $1 - 128 ))); the log says so: ${LOG_FILE}" >&2
  exit "$1"
}
trap 'interrupted 130' INT
trap 'interrupted 143' TERM
set +e
before=$(wc -l < "${LOG_FILE}")
"${COMMAND[@]}" 2>&1 | tee -a "${LOG_FILE}"
status=${PIPESTATUS[0]}
set -e
trap - INT TERM
# This run's part of the log, read once: grep -q on a pipe from tail would end tail early with SIGPIPE, which
# pipefail turns into "no match" at random (CI saw "before ray.init" for a log that said Ray had started).
(( status == 0 )) || run_output=$(tail -n "+$(( before + 1 ))" "${LOG_FILE}")
case "${status}" in
  0) end_line 0 completed ;;
  130|143) end_line "${status}" interrupted ;;
  *) end_line "${status}" failed ;;
esac
if (( status != 0 )) && [[ "${TRAINER}" == "trl" ]]; then  # the trainer's own one-line refusal, also on stderr
  reason=$(grep -a -m 1 "^error: " <<< "${run_output}" || true)
  [[ -z "${reason}" ]] || echo "grpo_train.sh: ${reason}" >&2
fi
if (( status != 0 )) && [[ "${TRAINER}" == "verl" ]]; then
  missing=$(grep -a -o -m 1 "No module named '[^']*'" <<< "${run_output}" | cut -d"'" -f2 | head -n 1 || true)
  grep -a -q "Started a local Ray instance\|Connected to Ray cluster" <<< "${run_output}" \
    && stage="after ray.init" || stage="before ray.init"
  if [[ -n "${missing}" ]]; then  # e.g. transfer_queue, which verl 0.9.1's trainer imports right after ray.init
    echo "grpo_train.sh: error: VERL stopped ${stage}: the module '${missing}' is not installed; pip install -r requirements-gpu.txt" >&2
  elif ! command -v nvidia-smi > /dev/null; then
    echo "grpo_train.sh: error: VERL stopped ${stage} on a machine without an NVIDIA GPU (no nvidia-smi); its rollout and actor workers need CUDA" >&2
  fi
fi
exit "${status}"
