"""TRAINER=trl end to end on CPU: a few GRPO steps of the built-in policy through the launcher, then the collector
and Figure 5 read the run back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import BUILTIN_POLICY, load_script

from grpo_mse.training.data import arithmetic_splits, write_parquet

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"
KEEP = {"PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV"}


def _weights(folder) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(folder, "model.safetensors"))


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILTIN_POLICY, "config.json")), reason="no built-in policy")
def test_trl_smoke_run_is_logged_collected_and_drawn(tmp_path):
    pytest.importorskip("trl")
    data = tmp_path / "data"
    for split, rows in arithmetic_splits(32, 16).items():
        write_parquet(rows, str(data / f"{split}.parquet"))
    env = {k: v for k, v in os.environ.items() if k in KEEP}
    env.update(
        TRAINER="trl", MODEL=BUILTIN_POLICY, DATA_DIR=str(data), GROUP_SIZE="4", BUDGET="32", SEED="1", LR="1e-3",
        MAX_RESPONSE_LENGTH="8", TEST_FREQ="1", BASE=str(tmp_path / "base"), WANDB_MODE="offline",
        PYTHON_BIN=sys.executable, OMP_NUM_THREADS="1", RUN_TAG="smoke", WANDB_API_KEY="secret-key-123",
    )  # fmt: skip
    result = subprocess.run(["bash", str(LAUNCHER), "--max_steps", "2"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "secret-key-123" not in result.stdout + result.stderr
    run = "smoke_tiny_policy_K4_seed1"
    logs = list((tmp_path / "base" / "logs").glob(f"{run}_B32_lr1e-3_*.log"))  # one log per run, lr in the name
    assert len(logs) == 1, logs
    log = logs[0].read_text()
    assert "step:0 - val-core/arithmetic_zero_shot/acc/mean@1:" in log
    assert "step:2 - " in log and "critic/score/mean:" in log  # the reward is logged per step

    saved = tmp_path / "base" / "checkpoints" / "demystifying_grpo" / f"{run}_B32_lr1e-3"
    before, after = _weights(BUILTIN_POLICY), _weights(saved)
    assert any(not torch.equal(before[name], after[name]) for name in before)  # parameters changed

    wandb_runs = list((tmp_path / "base" / "wandb" / "wandb").glob("offline-run-*"))
    assert len(wandb_runs) == 1 and list(wandb_runs[0].glob("*.wandb"))

    csv = tmp_path / "runs.csv"
    load_script("Policy_Optimization/collect_runs.py").main([str(wandb_runs[0]), "--out", str(csv)])
    import pandas as pd

    frame = pd.read_csv(csv)
    val = frame[frame["metric"] == "val-core/arithmetic_zero_shot/acc/mean@1"]
    assert set(val["K"]) == {4} and set(val["seed"]) == {1} and sorted(val["step"]) == [0, 1, 2]
    assert set(frame[frame["metric"] == "critic/score/mean"]["step"]) == {1, 2}

    from grpo_mse.figures.training import main_training, parse_args
    from grpo_mse.training.demo_summary import summary

    text = summary(frame)
    assert "| 4 | 1 | " in text and "| all | 1 | " in text and "Best K by end accuracy: K = 4" in text

    main_training(parse_args(["--csv", str(csv), "--out_dir", str(tmp_path / "fig")]))
    assert (tmp_path / "fig" / "figure5_accuracy_vs_K.png").stat().st_size > 0
