"""TRAINER=trl end to end on CPU: a few GRPO steps of the built-in policy through the launcher, then the collector
and Figure 5 read the run back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import BUILTIN_POLICY

from grpo_mse.commands import collect_runs as collect_runs_command
from grpo_mse.training.data import arithmetic_splits, write_splits

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"
KEEP = {"PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV"}


def _weights(folder) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(folder, "model.safetensors"))


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILTIN_POLICY, "config.json")), reason="no built-in policy")
def test_trl_smoke_run_is_logged_collected_and_drawn(tmp_path):
    pytest.importorskip("trl")
    data = tmp_path / "data"
    write_splits(arithmetic_splits(32, 16), str(data))
    env = {k: v for k, v in os.environ.items() if k in KEEP}
    env.update(
        TRAINER="trl",
        MODEL=BUILTIN_POLICY,
        DATA_DIR=str(data),
        GROUP_SIZE="4",
        BUDGET="32",
        SEED="1",
        LR="1e-3",
        MAX_RESPONSE_LENGTH="8",
        TEST_FREQ="1",
        BASE=str(tmp_path / "base"),
        WANDB_MODE="offline",
        PYTHON_BIN=sys.executable,
        OMP_NUM_THREADS="1",
        EXPERIMENT_NAME="test_K8_seed5",  # issue 25 case 3: a name that says another K and seed is a label only
        WANDB_API_KEY="secret-key-123",
    )
    result = subprocess.run(
        ["bash", str(LAUNCHER), "--max_steps", "2"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "secret-key-123" not in result.stdout + result.stderr
    run = "test_K8_seed5"
    logs = list((tmp_path / "base" / "logs").glob(f"{run}_B32_lr1e-3_*.log"))  # one log per run, lr in the name
    assert len(logs) == 1, logs
    log = logs[0].read_text()
    assert "step:0 - val-core/arithmetic_zero_shot/acc/mean@1:" in log
    assert "step:2 - " in log and "critic/score/mean:" in log  # the reward is logged per step
    assert "\n[trl] end: exit=0 steps=2\n" in log  # the run's own end line, then the launcher's
    assert log.endswith("\n[grpo_train] end: exit=0 reason=completed steps=2\n")

    saved = tmp_path / "base" / "checkpoints" / "demystifying_grpo" / f"{run}_B32_lr1e-3"
    before, after = _weights(BUILTIN_POLICY), _weights(saved)
    assert any(not torch.equal(before[name], after[name]) for name in before)  # parameters changed

    wandb_runs = list((tmp_path / "base" / "wandb" / "wandb").glob("offline-run-*"))
    assert len(wandb_runs) == 1 and list(wandb_runs[0].glob("*.wandb"))

    csv = tmp_path / "runs.csv"
    collect_runs_command.main([str(wandb_runs[0]), "--out", str(csv)])
    import pandas as pd

    frame = pd.read_csv(csv)
    val = frame[frame["metric"] == "val-core/arithmetic_zero_shot/acc/mean@1"]
    assert set(val["K"]) == {4} and set(val["seed"]) == {1} and sorted(val["step"]) == [0, 1, 2]
    assert set(frame[frame["metric"] == "critic/score/mean"]["step"]) == {1, 2}
    assert frame[["budget", "lr", "trainer", "status"]].drop_duplicates().values.tolist() == [
        [32, 0.001, "trl", "complete"]
    ]
    both = tmp_path / "both.csv"  # the console log and the wandb record of one run are one run (was "2 runs")
    with pytest.warns(UserWarning, match="K 8 in the name, 4 recorded; seed 5 in the name, 1 recorded"):
        collect_runs_command.main([str(tmp_path / "base"), "--out", str(both)])
    assert pd.read_csv(both).equals(frame)

    from grpo_mse.figures.training import main_training, parse_args
    from studies.train_demo_summary import summary

    text = summary(frame)
    assert "| 4 | 1 | " in text and "| all | 1 | " in text and "Best K by end accuracy: K = 4" in text

    main_training(parse_args(["--csv", str(csv), "--out_dir", str(tmp_path / "fig")]))
    assert (tmp_path / "fig" / "figure5_accuracy_vs_K.png").stat().st_size > 0


# ---------------------------------------------------------------- the command line (TrlTrainConfig)


@pytest.fixture(scope="module")
def trl_inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trl_inputs")
    write_splits(arithmetic_splits(16, 4), str(folder))
    return {
        "model": BUILTIN_POLICY,
        "train_file": str(folder / "train.parquet"),
        "val_file": str(folder / "test.parquet"),
        "reward_path": str(ROOT / "Policy_Optimization" / "reward.py"),
        "output_dir": str(folder / "out"),
    }


def trl_argv(inputs: dict, *extra: str) -> list[str]:
    return [item for name, value in inputs.items() for item in (f"--{name}", value)] + list(extra)


@pytest.mark.parametrize(
    "extra, save, norm",
    [
        ([], True, True),
        (
            ["--save_model", "0", "--norm_adv_by_std", "0"],
            False,
            False,
        ),  # the older 0/1 form, as grpo_train.sh passed it
        (["--save_model", "1", "--norm_adv_by_std", "1"], True, True),
        (["--no-save_model", "--no-norm_adv_by_std"], False, False),
        (["--no-save_model", "--save_model"], True, True),
        (["--save_model", "--norm_adv_by_std", "0", "--dry_run"], True, False),
    ],
)
def test_trl_booleans_are_switches_and_the_old_form_still_works(trl_inputs, extra, save, norm):
    from grpo_mse.training.trl_train import parse_args

    config = parse_args(trl_argv(trl_inputs, *extra))
    assert (config.save_model, config.norm_adv_by_std) == (save, norm)
    assert config.dry_run is ("--dry_run" in extra)
    assert config.logger_names == {"console", "wandb"}


def test_trl_config_maps_the_switch_to_trl_advantages(trl_inputs):
    pytest.importorskip("trl")
    from grpo_mse.training.trl_backend import grpo_config
    from grpo_mse.training.trl_train import parse_args

    for extra, scale in (([], "group"), (["--no-norm_adv_by_std"], "none"), (["--norm_adv_by_std", "0"], "none")):
        config = parse_args(trl_argv(trl_inputs, "--group_size", "4", "--budget", "32", *extra))
        assert grpo_config(config, 16).scale_rewards == scale
    assert grpo_config(parse_args(trl_argv(trl_inputs, "--group_size", "4", "--budget", "32")), 16).temperature == 1.0
    config = parse_args(trl_argv(trl_inputs, "--group_size", "4", "--budget", "32", "--temperature", "1.5"))
    assert config.temperature == 1.5 and grpo_config(config, 16).temperature == 1.5  # the rollouts' temperature


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--save_model", "2"], "argument --save_model: expected 0, 1 or no value (got '2')"),
        (["--lr", "1e6"], "1e+06 is not a learning rate for AdamW; use a value below 1"),
        (["--lr", "0"], "argument --lr: must be > 0 (got 0.0)"),
        (["--temperature", "0"], "argument --temperature: must be > 0 (got 0.0)"),
        (["--group_size", "3"], "K=3 must divide 1024"),
        (["--loggers", "[console,tensorboard]"], "--loggers: unknown ['tensorboard']; use console and/or wandb"),
    ],
)
def test_trl_command_line_refusals_are_one_line(trl_inputs, capsys, extra, message):
    from grpo_mse import cli
    from grpo_mse.training.trl_train import main

    with pytest.raises(SystemExit) as stop:
        cli.run(lambda: main(trl_argv(trl_inputs, *extra)))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and err.count("\n") == 1, err


def test_trl_config_checks_library_callers(trl_inputs):
    """TrlTrainConfig(...) from Python is held to the same checks as the command line."""
    from grpo_mse.errors import UsageError
    from grpo_mse.training.trl_train import TrlTrainConfig

    assert TrlTrainConfig(**trl_inputs, loggers="[wandb]").logger_names == {"wandb"}
    for kwargs, message in (
        ({"lr": 1.0}, "below 1"),
        ({"group_size": 1}, "--group_size must be >= 2"),
        ({"budget": 100}, "multiple of 8"),
        ({"loggers": "[console,tb]"}, "unknown ['tb']"),
        ({"val_file": trl_inputs["val_file"] + ".missing"}, "not found"),
    ):
        with pytest.raises(UsageError, match=re.escape(message)):
            TrlTrainConfig(**{**trl_inputs, **kwargs})
