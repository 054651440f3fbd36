"""Policy_Optimization/grpo_train.sh and the group-size sweep, checked on CPU (no GPU, no training)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_mse.training.data import arithmetic_splits, write_splits
from grpo_mse.training.sweep import budget_settings, launch, plan

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"
CONFIG_VARS = (
    "BASE_DIR BASE REPO_DIR MODEL DATA_DIR TRAIN_FILE VAL_FILE GPUS CUDA_VISIBLE_DEVICES GPU_UTIL NNODES PYTHON_BIN "
    "GROUP_SIZE RUN_TAG EXPERIMENT_NAME PROJECT_NAME BUDGET SEED DRY_RUN CONDA_ROOT ENV_NAME WANDB_API_KEY LOG_FILE "
    "TRAINER ATTN_IMPL SAVE_CONTENTS MAX_CKPT_TO_KEEP SAVE_FREQ LR TMPDIR HF_HOME WANDB_DIR REWARD_TIMEOUT CKPT_DIR "
    "TEMPERATURE"
).split()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("arith")
    write_splits(arithmetic_splits(32, 8), str(folder))
    return folder


def launcher_env(tmp_path, **settings) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    env.update(BASE_DIR=str(tmp_path), PYTHON_BIN=sys.executable, WANDB_MODE="offline")
    env.update({k: str(v) for k, v in settings.items()})
    return env


def run_launcher(env, *overrides, timeout=180):
    return subprocess.run(
        ["bash", str(LAUNCHER), *overrides], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_placeholders_refuse_to_run(tmp_path, data_dir):
    result = run_launcher(launcher_env(tmp_path, DATA_DIR=data_dir))
    assert result.returncode != 0 and "MODEL is not set" in result.stderr
    result = run_launcher(launcher_env(tmp_path, MODEL="Qwen/Qwen2.5-1.5B-Instruct"))
    assert result.returncode != 0 and "DATA_DIR is not set" in result.stderr


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"GROUP_SIZE": 48}, "GROUP_SIZE=48 must divide 1024 (train_batch_size"),
        ({"GROUP_SIZE": 512}, "GROUP_SIZE=512 must divide 256 (ppo_mini_batch_size"),
        ({"GROUP_SIZE": 256}, "GROUP_SIZE=256 must divide 128 (total_epochs"),
        ({"GROUP_SIZE": "abc"}, "GROUP_SIZE=abc must be a positive integer"),
        ({"GPUS": 4, "CUDA_VISIBLE_DEVICES": "0,1"}, "lists 2 devices"),
        ({"GPU_UTIL": 1.5}, "GPU_UTIL=1.5 must be in (0, 1]"),
        ({"GPU_UTIL": "0.0"}, "GPU_UTIL=0.0 must be in (0, 1]"),
        ({"GPU_UTIL": "0"}, "GPU_UTIL=0 must be in (0, 1]"),
        ({"DATA_DIR": "/nonexistent"}, "not found"),
        ({"DRY_RUN": "maybe"}, "DRY_RUN=maybe: use 0, 1 or print"),
        ({"TRAINER": "deepspeed"}, "TRAINER=deepspeed: use verl or trl"),
        ({"ATTN_IMPL": "flash"}, "ATTN_IMPL=flash: use sdpa"),
        ({"MODEL": "./no_such_model"}, "MODEL=./no_such_model: no such local folder"),
        ({"MODEL": "/no/such/model"}, "MODEL=/no/such/model: no such local folder"),
        ({"REWARD_TIMEOUT": "0"}, "REWARD_TIMEOUT=0 must be a positive number"),
        ({"TEMPERATURE": "0"}, "TEMPERATURE=0 must be a positive number"),
        ({"TEMPERATURE": "-0.5"}, "TEMPERATURE=-0.5 must be a positive number"),
        ({"MAX_CKPT_TO_KEEP": "0"}, "MAX_CKPT_TO_KEEP=0 must be a positive integer"),
    ],
)
def test_invalid_settings_exit_nonzero(tmp_path, data_dir, settings, message):
    env = launcher_env(tmp_path / "base", **{"MODEL": "m", "DATA_DIR": data_dir, "DRY_RUN": "print", **settings})
    result = run_launcher(env)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "base").exists()  # nothing written


@pytest.mark.parametrize(
    "override",
    ["actor_rollout_ref.rollout.n=16", "data.train_batch_size=64", "+actor_rollout_ref.actor.ppo_mini_batch_size=4"],
)
def test_overrides_that_contradict_k_or_budget_are_refused(tmp_path, data_dir, override):
    env = launcher_env(tmp_path, MODEL="m", DATA_DIR=data_dir, GROUP_SIZE=32, DRY_RUN="print")
    result = run_launcher(env, override)
    assert result.returncode == 2 and f"override {override} contradicts GROUP_SIZE/BUDGET" in result.stderr
    assert result.stdout == ""


def test_original_style_file_names_base_and_repo_dir(tmp_path, data_dir):
    """TRAIN_FILE/VAL_FILE are names in DATA_DIR (as in the original); full paths keep working."""
    env = launcher_env(
        tmp_path,
        MODEL="m",
        DATA_DIR=data_dir,
        TRAIN_FILE="train.parquet",
        VAL_FILE="test.parquet",
        BASE=tmp_path / "base",
        REPO_DIR=ROOT,
        DRY_RUN="print",
    )
    result = run_launcher(env)
    assert result.returncode == 0, result.stderr
    assert f"data.train_files=\\'{data_dir}/train.parquet\\'" in result.stdout  # paths quoted for Hydra
    assert f"data.val_files=\\'{data_dir}/test.parquet\\'" in result.stdout
    ckpt = f"{tmp_path}/base/checkpoints/demystifying_grpo/grpo_m_K32_B1024_lr1e-6"  # one folder per run
    assert f"trainer.default_local_dir=\\'{ckpt}\\'" in result.stdout
    env.update(TRAIN_FILE=str(data_dir / "train.parquet"), DATA_DIR="")
    env.update(VAL_FILE=str(data_dir / "test.parquet"))
    result = run_launcher(env)
    assert result.returncode == 0 and f"data.train_files=\\'{data_dir}/train.parquet\\'" in result.stdout
    env.update(REPO_DIR=str(tmp_path))
    result = run_launcher(env)
    assert result.returncode == 2 and "REPO_DIR" in result.stderr


def test_attention_checkpoints_and_ray_env(tmp_path, data_dir):
    env = launcher_env(
        tmp_path,
        MODEL="m",
        DATA_DIR=data_dir,
        DRY_RUN="print",
        WANDB_API_KEY="secret-key-123",
        HF_TOKEN="hf_secret",
        HF_HOME=tmp_path / "hf",
        TMPDIR="/tmp",
    )
    out = run_launcher(env).stdout
    for expected in (
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=False",
        r"actor_rollout_ref.actor.checkpoint.save_contents=\[model\]",
        "trainer.max_actor_ckpt_to_keep=2",
        r"+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE=\'offline\'",
        rf"+ray_kwargs.ray_init.runtime_env.env_vars.HF_HOME=\'{tmp_path}/hf\'",
        rf"+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_DIR=\'{tmp_path}/wandb\'",
        r"+ray_kwargs.ray_init.runtime_env.env_vars.TMPDIR=\'/tmp\'",
        "+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=",
    ):
        assert expected.replace("\\\\", "\\") in out, expected
    assert "secret-key-123" not in out and "hf_secret" not in out and "WANDB_API_KEY=\\'" not in out
    env.update(ATTN_IMPL="flash_attention_2", SAVE_CONTENTS="[model,optimizer,extra]", MAX_CKPT_TO_KEEP="5")
    out = run_launcher(env).stdout
    assert "attn_implementation=flash_attention_2" in out and "use_remove_padding=True" in out
    assert r"save_contents=\[model\,optimizer\,extra\]" in out and "max_actor_ckpt_to_keep=5" in out


def test_print_only_budget_scaling_and_masking(tmp_path, data_dir):
    env = launcher_env(
        tmp_path,
        MODEL="Qwen/Qwen2.5-1.5B-Instruct",
        DATA_DIR=data_dir,
        GROUP_SIZE=16,
        SEED=3,
        TEMPERATURE="0.7",
        DRY_RUN="print",
        WANDB_API_KEY="secret-key-123",
    )
    result = run_launcher(env, "trainer.total_epochs=2", "+extra.api_key=hunter2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in (
        "data.train_batch_size=64",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "trainer.total_epochs=8",
        "actor_rollout_ref.rollout.n=16",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "algorithm.use_kl_in_reward=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "data.max_prompt_length=512",
        "data.max_response_length=512",
        "trainer.test_freq=5",
        "trainer.save_freq=100",
        "actor_rollout_ref.rollout.temperature=0.7",
        "reward.custom_reward_function.name=compute_score",
        "data.seed=3",
        "grpo_Qwen2.5-1.5B-Instruct_K16_seed3",
        f"reward.custom_reward_function.path=\\'{ROOT / 'Policy_Optimization' / 'reward.py'}\\'",
    ):
        assert expected in out, expected
    assert out.index("trainer.total_epochs=8") < out.index("trainer.total_epochs=2")  # user overrides last
    assert "secret-key-123" not in out + result.stderr and "hunter2" not in out
    assert "WANDB_API_KEY=****" in out
    assert "HF_HOME=default" in out  # the user's own cache, never redirected into BASE


def test_conda_activation_only_when_configured(tmp_path, data_dir):
    conda = tmp_path / "conda" / "etc" / "profile.d"
    conda.mkdir(parents=True)
    (conda / "conda.sh").write_text('conda() { echo "conda $1 $2" >&2; }\n')
    base = {"MODEL": "m", "DATA_DIR": data_dir, "DRY_RUN": "print"}
    result = run_launcher(launcher_env(tmp_path, **base, CONDA_ROOT=tmp_path / "conda", ENV_NAME="verl-gpu"))
    assert result.returncode == 0 and "conda activate verl-gpu" in result.stderr
    result = run_launcher(launcher_env(tmp_path, **base, CONDA_ROOT=tmp_path / "conda"))
    assert result.returncode == 0 and "conda" not in result.stderr


@pytest.mark.slow
def test_dry_run_composes_and_validates_with_verl(tmp_path, data_dir):
    pytest.importorskip("verl")
    env = launcher_env(
        tmp_path,
        MODEL="Qwen/Qwen2.5-1.5B-Instruct",
        DATA_DIR=data_dir,
        GROUP_SIZE=32,
        DRY_RUN=1,
        WANDB_API_KEY="secret-key-123",
    )
    result = run_launcher(env, "trainer.total_epochs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    config = result.stdout
    for expected in (
        "adv_estimator: grpo",
        "train_batch_size: 32",
        "total_epochs: 2",
        "loss_mode: vanilla",
        "attn_implementation: sdpa",
        "max_actor_ckpt_to_keep: 2",
        "resume_mode: disable",
        "WANDB_MODE: offline",
    ):
        assert expected in config, expected
    assert "save_contents:\n      - model\n      load_contents" in config
    assert "secret-key-123" not in config + result.stderr
    assert "composed and validated by VERL" in result.stderr


@pytest.mark.slow
def test_dry_run_rejects_misspelled_override(capsys, data_dir):
    """The same check in process (saves a second VERL start-up): an unknown key is refused in one line."""
    pytest.importorskip("verl")
    from grpo_mse.training.verl_launch import main as dry_run_main

    assert dry_run_main(["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.optim.lrr=1e-6"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ") and err.count("\n") == 1 and "did you mean actor_rollout_ref.actor.optim.lr?" in err
    )
    files = [f"data.{k}_files={data_dir}/{s}.parquet" for k, s in (("train", "train"), ("val", "test"))]
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm", *files]
    assert dry_run_main(overrides) == 1  # VERL's validate_config: no micro batch size


def test_sweep_plan_and_budget():
    assert budget_settings(32) == {"train_batch_size": 32, "ppo_mini_batch_size": 8, "total_epochs": 4}
    assert budget_settings(64, budget=4096) == {"train_batch_size": 64, "ppo_mini_batch_size": 16, "total_epochs": 8}
    with pytest.raises(ValueError, match="K=48 must divide 1024"):
        plan([8, 48], [0])
    runs = plan([4, 128], [0, 1], run_tag="gsm8k")
    assert [r.name for r in runs] == ["gsm8k_K4_seed0", "gsm8k_K128_seed0", "gsm8k_K4_seed1", "gsm8k_K128_seed1"]
    assert [(r.K, r.seed) for r in runs] == [(4, 0), (128, 0), (4, 1), (128, 1)]  # seed by seed, K inside


def test_sweep_dry_run_launches_each_run(tmp_path, monkeypatch):
    stub = tmp_path / "stub.sh"
    stub.write_text('echo "$GROUP_SIZE $SEED $EXPERIMENT_NAME $DRY_RUN $BUDGET $*" >> "$STUB_LOG"\n')
    monkeypatch.setenv("STUB_LOG", str(tmp_path / "calls.txt"))
    results = launch(plan([8, 32], [0, 1]), ["trainer.x=1"], dry_run=True, launcher=str(stub))
    assert [code for _, code in results] == [0, 0, 0, 0]
    assert (tmp_path / "calls.txt").read_text().splitlines() == [
        "8 0 grpo_K8_seed0 1 1024 trainer.x=1",
        "32 0 grpo_K32_seed0 print 1024 trainer.x=1",
        "8 1 grpo_K8_seed1 print 1024 trainer.x=1",
        "32 1 grpo_K32_seed1 print 1024 trainer.x=1",
    ]
    stub.write_text("exit 3\n")
    results = launch(plan([8, 32], [0]), dry_run=False, launcher=str(stub))
    assert [code for _, code in results] == [3]  # stops at the first failure


def test_sweep_script_rejects_bad_k(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "Policy_Optimization" / "sweep_group_size.py"), "--K_list", "8", "48", "--dry_run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "K=48 must divide 1024" in result.stderr


def test_budget_cli_is_what_the_launcher_reads():
    from grpo_mse.training import budget, sweep

    assert Path(sweep.LAUNCHER).is_file()
    result = subprocess.run(
        [sys.executable, "-m", "grpo_mse.training.budget", "16", "512"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.split() == [
        "TRAIN_BATCH_SIZE=32",
        "PPO_MINI_BATCH_SIZE=8",
        "TOTAL_EPOCHS=4",
    ]
    assert budget.main(["3", "1024"]) == 2 and budget.main(["8", "100"]) == 2 and budget.main(["8"]) == 2
    with pytest.raises(ValueError, match="at least 2"):
        budget.budget_settings(1)


def test_sweep_refuses_unknown_dry_run_value():
    script = ROOT / "Policy_Optimization" / "sweep_group_size.py"
    result = subprocess.run(
        [sys.executable, str(script), "--K_list", "8"],
        env={**os.environ, "DRY_RUN": "maybe"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "DRY_RUN='maybe': use 1 or print" in result.stderr


def test_trl_command_shares_the_settings(tmp_path, data_dir):
    env = launcher_env(
        tmp_path,
        TRAINER="trl",
        MODEL=ROOT / "assets" / "tiny_policy",
        DATA_DIR=data_dir,
        GROUP_SIZE=8,
        BUDGET=256,
        SEED=2,
        LR="1e-4",
        TEMPERATURE="0.7",
        DRY_RUN="print",
    )
    result = run_launcher(env, "--max_steps", "3")
    assert result.returncode == 0, result.stderr
    for expected in (
        "-m grpo_mse.training.trl_train",
        "--group_size 8 --budget 256 --seed 2 --lr 1e-4",
        f"--train_file {data_dir}/train.parquet",
        f"--reward_path {ROOT}/Policy_Optimization/reward.py",
        "--experiment_name grpo_tiny_policy_K8_seed2",
        "--max_steps 3",
        "--temperature 0.7",
        "train_batch_size=32 ppo_mini_batch_size=8 total_epochs=4",
    ):
        assert expected in result.stdout, expected
    command = result.stdout.split("command: ", 1)[1]
    assert " --save_model " in command + " " and "--save_model 1" not in command  # a switch, not a 0/1 value
    no_save = run_launcher({**env, "SAVE_MODEL": "0"})
    assert no_save.returncode == 0 and " --no-save_model" in no_save.stdout and "--save_model 0" not in no_save.stdout
    result = run_launcher(env, "--group_size", "4")
    assert result.returncode == 2 and "contradicts GROUP_SIZE/BUDGET" in result.stderr
