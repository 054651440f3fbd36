"""User journeys through the real command lines (issue 17), at tiny sizes and not dry:
data -> a real sweep (TRAINER=trl, 2 K x 2 seeds x 2 steps) -> collect_runs.py -> make_figures.py -> Table 2,
whose values must equal the ones in the logs; once with wandb disabled (console logs) and once offline (wandb runs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from grpo_mse.training.data import arithmetic_splits, write_splits

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "assets" / "tiny_policy"
ACC = "val-core/arithmetic_zero_shot/acc/mean@1"
KEEP = {"PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV"}
STEP_ACC = re.compile(r"step:(\d+) - .*" + re.escape(ACC) + r":([0-9.eE+-]+)")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (POLICY / "config.json").exists(), reason="no built-in policy")]


def run(args, env, cwd, timeout=600):
    result = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result


def accuracy_in_logs(logs: Path) -> dict:
    """{(K, seed): {step: accuracy}} read straight from the console logs, as a user would read them."""
    found = {}
    for log in logs.glob("*.log"):
        k, seed = (int(x) for x in re.search(r"_K(\d+)_seed(\d+)_", log.name).groups())
        for line in log.read_text().replace("\r", "\n").splitlines():
            match = STEP_ACC.search(line)
            if match:
                found.setdefault((k, seed), {})[int(match.group(1))] = float(match.group(2))
    return found


@pytest.mark.parametrize("wandb_mode", ["disabled", "offline"])
def test_sweep_collect_figures_table2(tmp_path, wandb_mode):
    data = tmp_path / "data"
    write_splits(arithmetic_splits(16, 8), str(data))
    env = {k: v for k, v in os.environ.items() if k in KEEP}
    env.update(
        TRAINER="trl",
        MODEL=str(POLICY),
        DATA_DIR=str(data),
        BASE=str(tmp_path / "base"),
        LR="1e-3",
        MAX_RESPONSE_LENGTH="4",
        TEST_FREQ="1",
        WANDB_MODE=wandb_mode,
        SAVE_MODEL="0",
        PYTHON_BIN=sys.executable,
        OMP_NUM_THREADS="1",
        LOGGERS="[console,wandb]",
        RUN_TAG="journey",
    )  # no DRY_RUN: a real sweep
    run(
        [
            sys.executable,
            "Policy_Optimization/sweep_group_size.py",
            "--K_list",
            "2",
            "4",
            "--seeds",
            "0",
            "1",
            "--budget",
            "32",
            "--",
            "--max_steps",
            "2",
            "--threads",
            "1",
        ],
        env,
        ROOT,
    )
    logs = tmp_path / "base" / "logs"
    assert len(list(logs.glob("*.log"))) == 4  # one log per run
    truth = accuracy_in_logs(logs)
    assert sorted(truth) == [(2, 0), (2, 1), (4, 0), (4, 1)] and all(sorted(v) == [0, 1, 2] for v in truth.values())

    source = logs if wandb_mode == "disabled" else tmp_path / "base" / "wandb"
    if wandb_mode == "offline":
        assert len(list(source.glob("wandb/offline-run-*"))) == 4
    csv = tmp_path / "runs.csv"
    run([sys.executable, "Policy_Optimization/collect_runs.py", str(source), "--out", str(csv)], env, ROOT)
    frame = pd.read_csv(csv)
    acc = frame[frame["metric"] == ACC]
    assert {(r.K, r.seed, r.step): r.value for r in acc.itertuples()} == pytest.approx(
        {(k, s, step): v for (k, s), steps in truth.items() for step, v in steps.items()}, abs=5e-7
    )

    out = tmp_path / "fig"
    run([sys.executable, "plots/make_figures.py", "--training_csv", str(csv), "--out_dir", str(out)], env, ROOT)
    table = (out / "figure5_accuracy_vs_K_table.md").read_text()
    for k in (2, 4):  # Table 2 = mean over the two seeds of the final (step 2) and best logged accuracy, in %
        final = [truth[(k, s)][2] * 100 for s in (0, 1)]
        best = [max(truth[(k, s)].values()) * 100 for s in (0, 1)]
        row = next(line for line in table.splitlines() if line.startswith(f"| {k} | 2 | "))
        cells = [c.strip().strip("*") for c in row.split("|")[3:5]]
        assert float(cells[0].split(" ± ")[0]) == pytest.approx(sum(final) / 2, abs=0.006)
        assert float(cells[1].split(" ± ")[0]) == pytest.approx(sum(best) / 2, abs=0.006)
    assert (out / "figure5_accuracy_vs_K.png").stat().st_size > 0
