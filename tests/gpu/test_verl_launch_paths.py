"""GPU readiness checked on CPU (issue 18), the VERL launcher from a long base folder: temporary paths never
under it, resume mode, Ray's init."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from gpu_paths import ROOT, TINY

# ---------------------------------------------------------------- VERL launcher: temporary paths, HF_HOME, resume

LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"
KEEP_OUT = (
    "BASE_DIR",
    "BASE",
    "TMPDIR",
    "HF_HOME",
    "RAY_TMP",
    "RESUME_MODE",
    "CKPT_DIR",
    "LOG_FILE",
    "DRY_RUN",
    "TRAINER",
    "REPO_DIR",
    "CUDA_VISIBLE_DEVICES",
    "WANDB_API_KEY",
)


@pytest.fixture(scope="module")
def long_base(tmp_path_factory):
    """A BASE of 100+ characters with the arithmetic parquet files in it."""
    from grpo_mse.training.data import arithmetic_splits, write_splits

    base = tmp_path_factory.mktemp("long") / ("a_rather_long_folder_name_" * 4) / "base"
    (base / "data").mkdir(parents=True)
    write_splits(arithmetic_splits(32, 8), str(base / "data"))
    assert len(str(base)) >= 100
    return base


def launch(base, *overrides, timeout=120, **settings):
    env = {k: v for k, v in os.environ.items() if k not in KEEP_OUT}
    env.update(
        BASE=str(base),
        MODEL=TINY,
        DATA_DIR=str(base / "data"),
        PYTHON_BIN=sys.executable,
        WANDB_MODE="disabled",
        LOGGERS="[console]",
        GPUS="1",
        GROUP_SIZE="8",
        BUDGET="64",
        DRY_RUN="print",
    )
    env.update({k: str(v) for k, v in settings.items()})
    return subprocess.run(
        ["bash", str(LAUNCHER), *overrides], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_temporary_paths_never_under_base(long_base):
    result = launch(long_base)
    assert result.returncode == 0, result.stderr
    ray_tmp = f"/tmp/ray_{os.getuid()}"
    assert f"+ray_kwargs.ray_init._temp_dir={ray_tmp}" in result.stdout
    assert "env_vars.TMPDIR" not in result.stdout and "env_vars.HF_HOME" not in result.stdout
    assert "hf_cache" not in result.stdout and "HF_HOME=default" in result.stdout
    result = launch(long_base, HF_HOME="/data/hf", TMPDIR="/scratch/t")
    assert "env_vars.HF_HOME=\\'/data/hf\\'" in result.stdout and "env_vars.TMPDIR=\\'/scratch/t\\'" in result.stdout
    for settings, message in (
        ({"RAY_TMP": "/tmp/" + "r" * 40}, "RAY_TMP=/tmp/rrrr"),
        ({"RAY_TMP": "relative"}, "RAY_TMP=relative must be an absolute path"),
        ({"TMPDIR": str(long_base)}, "vLLM's IPC sockets"),
    ):
        result = launch(long_base, **settings)
        assert result.returncode == 2 and result.stdout == "", result.stdout
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_resume_mode(long_base, tmp_path):
    result = launch(long_base)
    assert "trainer.resume_mode=disable" in result.stdout and "holds" not in result.stdout
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_3").mkdir(parents=True)
    result = launch(long_base, CKPT_DIR=ckpt)
    assert f"[grpo_train] {ckpt} holds 1 checkpoint(s): RESUME_MODE=disable starts a fresh run" in result.stdout
    result = launch(long_base, CKPT_DIR=ckpt, RESUME_MODE="auto")
    assert "trainer.resume_mode=auto" in result.stdout and "no optimizer state, so Adam restarts" in result.stdout
    result = launch(long_base, CKPT_DIR=ckpt, RESUME_MODE="auto", SAVE_CONTENTS="[model,optimizer,extra]")
    assert "trainer.resume_mode=auto" in result.stdout and "Adam restarts" not in result.stdout
    result = launch(long_base, RESUME_MODE=ckpt / "global_step_3")
    assert f"trainer.resume_mode=resume_path trainer.resume_from_path={ckpt}/global_step_3" in result.stdout
    for bad in ("sometimes", str(ckpt)):
        result = launch(long_base, RESUME_MODE=bad)
        assert result.returncode == 2 and f"RESUME_MODE={bad}: use disable, auto or" in result.stderr


@pytest.mark.slow
def test_dry_run_validates_resume_and_ray_temp_dir(long_base):
    pytest.importorskip("verl")
    result = launch(long_base, DRY_RUN="1", timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resume_mode: disable" in result.stdout and f"_temp_dir: /tmp/ray_{os.getuid()}" in result.stdout


@pytest.mark.slow
def test_real_verl_launch_from_long_base_passes_ray_init(long_base):
    """A real (not dry) VERL launch from a 100+ character BASE: Ray starts (no AF_UNIX path-length error),
    and the launcher stops after ray.init with one line saying why: here the missing transfer_queue module that
    verl 0.9.1's trainer imports first (with it installed: no GPU)."""
    pytest.importorskip("verl")
    pytest.importorskip("ray")
    if subprocess.run(["bash", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("a GPU machine: this emulates the launch on CPU")
    result = launch(
        long_base,
        "trainer.total_training_steps=1",
        "+ray_kwargs.ray_init.include_dashboard=False",
        "+ray_kwargs.ray_init.num_cpus=2",
        DRY_RUN="0",
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert "AF_UNIX path length" not in output and "validate_socket_filename" not in output
    assert "Started a local Ray instance" in output, output[-3000:]
    assert result.returncode != 0
    # verl 0.9.1's trainer imports transfer_queue right after ray.init (requirements-gpu.txt has it; this venv not)
    last = result.stderr.strip().splitlines()[-1]
    assert last in (
        "grpo_train.sh: error: VERL stopped after ray.init: the module 'transfer_queue' is not installed; "
        "pip install -r requirements-gpu.txt",
        "grpo_train.sh: error: VERL stopped after ray.init on a machine without an NVIDIA GPU (no nvidia-smi); "
        "its rollout and actor workers need CUDA",
    ), last


def test_stage_of_a_failed_launch_is_read_from_the_whole_log(long_base, tmp_path):
    """The stage line reads the run's whole log: a long log after Ray's start line used to end the reading
    pipe early (SIGPIPE under pipefail) and say "before ray.init" for a run that had started Ray (CI, session 13)."""
    fake_python = tmp_path / "python"
    fake_python.write_text(
        "#!/bin/bash\n"
        'if [[ " $* " == *" verl.trainer.main_ppo "* ]]; then\n'
        "  echo 'Started a local Ray instance.'\n"
        "  seq 1 200000\n"
        "  echo \"ModuleNotFoundError: No module named 'transfer_queue'\"\n"
        "  exit 1\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    fake_python.chmod(0o755)
    result = launch(long_base, DRY_RUN="0", PYTHON_BIN=fake_python, LOG_FILE=tmp_path / "run.log")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "grpo_train.sh: error: VERL stopped after ray.init: the module 'transfer_queue' is not installed; "
        "pip install -r requirements-gpu.txt"
    )
