"""Fixes from the new-user sweep of issue 25 (scripts/user_sweep.py, docs/user_sweep.md): launcher settings refused
in one line before any folder or log is made."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"
SWEEP = ROOT / "Policy_Optimization" / "sweep_group_size.py"


def launch(tmp_path, *args, dry_run="0", **settings):
    """grpo_train.sh with TRL, the tiny policy, placeholder data files and BASE under tmp_path."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_text("x")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    env.update(
        {
            "DRY_RUN": dry_run,
            "TRAINER": "trl",
            "MODEL": str(ROOT / "assets" / "tiny_policy"),
            "DATA_DIR": str(data),
            "BASE": str(tmp_path / "base"),
            "PYTHON_BIN": sys.executable,
            "WANDB_MODE": "offline",
            "GROUP_SIZE": "4",
            "BUDGET": "32",
            **settings,
        }
    )
    return subprocess.run(["bash", str(LAUNCHER), *args], env=env, cwd=tmp_path, capture_output=True, text=True)


def refused(result, message, tmp_path):
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and message in result.stderr, result.stderr
    assert not (tmp_path / "base").exists()  # nothing made: no log, no wandb folder


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"LOGGERS": "[consol]"}, "LOGGERS=[consol]: unknown consol; use console, wandb (TRAINER=trl)"),
        ({"LOGGERS": "[console,tensorboard]"}, "unknown tensorboard"),
        ({"EXPERIMENT_NAME": "a/b"}, "EXPERIMENT_NAME=a/b holds a '/'"),
        ({"RUN_TAG": "x/y"}, "RUN_TAG=x/y holds a '/'"),
    ],
)
def test_bad_names_are_refused_before_anything_is_made(tmp_path, settings, message):
    """LOGGERS=[consol] was refused by the trainer after the log and wandb folders were made, on stdout only;
    EXPERIMENT_NAME=a/b trained and logged into a nested logs/a/ folder."""
    refused(launch(tmp_path, **settings), message, tmp_path)


def test_loggers_written_without_brackets_or_with_spaces_pass(tmp_path):
    for loggers in ("console", "[console, wandb]", "[]"):
        result = launch(tmp_path, dry_run="print", LOGGERS=loggers)
        assert result.returncode == 0, result.stderr


def test_a_base_that_is_a_file_is_refused_in_one_line(tmp_path):
    """BASE=<a file> failed in five mkdir lines, exit 1."""
    (tmp_path / "f.txt").write_text("keep")
    for base in ("f.txt", "f.txt/x/y"):
        result = launch(tmp_path, BASE=base)
        assert result.returncode == 2 and f"{tmp_path}/f.txt is a file, not a folder" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert (tmp_path / "f.txt").read_text() == "keep"


@pytest.mark.parametrize(
    "flags, message",
    [(["--max_steps", "-1"], "--max_steps"), (["--max_stpes", "2"], "unrecognized arguments: --max_stpes")],
)
def test_trainer_flags_are_checked_before_the_run_is_made(tmp_path, flags, message):
    """A bad TRL flag was refused only after the launcher made BASE's folders and the run's log."""
    refused(launch(tmp_path, *flags), message, tmp_path)


def test_a_sweep_whose_runs_are_all_refused_exits_2(tmp_path):
    """sweep_group_size.py printed the launcher's refusal and exited 1 (as for a failed run)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    env.update(TRAINER="trl", MODEL=str(tmp_path / "no_model"), DATA_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, str(SWEEP), "--K_list", "2", "--seeds", "1", "--budget", "32", "--dry_run"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "grpo_train.sh: error: " in result.stderr, result.stderr


@pytest.mark.parametrize("content", ['{"a": 1}', "[1, 2]", "not json", None])
def test_gpu_check_advisor_step_refuses_a_bad_run_file_with_exit_2(tmp_path, content):
    """gpu_check_steps.py advisor exited 1 (SystemExit with a message) on a JSON without an advisor, and with a
    traceback on a missing or non-JSON file."""
    run = tmp_path / "run.json"
    if content is not None:
        run.write_text(content)
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check_steps.py"), "advisor", str(run), str(tmp_path / "o.json")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and result.stderr.startswith(f"error: {run}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "o.json").exists()


def test_a_python_without_the_training_packages_is_named_before_anything_is_made(tmp_path):
    """PYTHON_BIN defaults to `python`; one without torch failed inside the trainer with a traceback (the sweep's
    sweep_group_size.py run), after the log was made."""
    hide = f"{ROOT / 'scripts' / 'hide_modules'}:{ROOT}"
    result = launch(tmp_path, GPU_CHECK_HIDE="trl", PYTHONPATH=hide)
    refused(result, f"{sys.executable} cannot import trl: set PYTHON_BIN", tmp_path)
