"""Adaptive K around the run: the launcher forwards it to TRL only, the summary compares means with Welch
intervals, k_validation's adaptive stage refuses bad settings before writing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BUILTIN_POLICY

from grpo_mse.training.data import arithmetic_splits, write_splits

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"


def launcher(env_extra: dict, tmp_path) -> subprocess.CompletedProcess:
    data = tmp_path / "data"
    write_splits(arithmetic_splits(32, 8), str(data))
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "PYTHONPATH"}}
    env.update(
        MODEL=BUILTIN_POLICY,
        DATA_DIR=str(data),
        GROUP_SIZE="4",
        BUDGET="32",
        BASE=str(tmp_path / "base"),
        WANDB_MODE="offline",
        PYTHON_BIN=sys.executable,
        DRY_RUN="print",
        **env_extra,
    )
    return subprocess.run(["bash", str(LAUNCHER)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_launcher_forwards_adaptive_k_to_trl_only(tmp_path):
    fixed = launcher({"TRAINER": "trl"}, tmp_path)
    assert fixed.returncode == 0 and "--adaptive_k" not in fixed.stdout  # a fixed-K command is unchanged
    adaptive = launcher(
        {"TRAINER": "trl", "ADAPTIVE_K_EVERY": "4", "ADAPTIVE_K_LIST": "2 4", "ADAPTIVE_K_T": "8"}, tmp_path
    )
    assert adaptive.returncode == 0, adaptive.stderr
    assert (
        "--adaptive_k_every 4 --adaptive_k_T 8 --adaptive_k_M 4 --adaptive_k_n_oracle 64 --adaptive_k_list 2 4"
        in adaptive.stdout
    )
    for env, message in (
        ({"TRAINER": "verl", "ADAPTIVE_K_EVERY": "4"}, "adaptive K needs TRAINER=trl"),
        ({"TRAINER": "trl", "ADAPTIVE_K_EVERY": "x"}, "ADAPTIVE_K_EVERY=x must be a whole number"),
        ({"TRAINER": "trl", "ADAPTIVE_K_LIST": "2 4"}, "needs ADAPTIVE_K_EVERY=N"),
        ({"TRAINER": "trl", "ADAPTIVE_K_EVERY": "2", "ADAPTIVE_K_M": "0"}, "ADAPTIVE_K_M=0 must be a positive integer"),
    ):
        result = launcher(env, tmp_path)
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert not (tmp_path / "base").exists()


# ---------------------------------------------------------------- the experiment's summary (k_validation adaptive)

METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"


def collected(runs: dict, choices: dict | None = None):
    """Collector rows: per (K, seed) the validation values at steps 0, 3, 6; adaptive runs add their choices."""
    import pandas as pd

    rows = []
    for (k, seed), values in runs.items():
        rows += [{"K": k, "seed": seed, "step": s, "metric": METRIC, "value": v} for s, v in zip((0, 3, 6), values)]
    for (seed, step), (k, k_star) in (choices or {}).items():
        rows.append({"K": 4, "seed": seed, "step": step, "metric": "adaptive_k/K", "value": k})
        rows.append({"K": 4, "seed": seed, "step": step, "metric": "adaptive_k/identified", "value": 0.0})
        if k_star is not None:
            rows.append({"K": 4, "seed": seed, "step": step, "metric": "adaptive_k/K_star_exact", "value": k_star})
        for s in range(step + 1, step + 4):
            rows.append({"K": 4, "seed": seed, "step": s, "metric": "trl/group_size", "value": k})
    return pd.DataFrame(rows)


def test_adaptive_summary_compares_means_with_welch_intervals(tmp_path):
    import numpy as np
    from scipy import stats

    from studies.advisor import k_validation as kv
    from studies.advisor.training_runs import adaptive_k, run_means

    rng = np.random.default_rng(0)
    fixed = {(k, s): [0.05, *(0.1 + 0.01 * (k == 8) + rng.normal(0, 0.01, 2))] for k in (2, 4, 8) for s in range(5)}
    ours = {(4, s): [0.05, *(0.12 + rng.normal(0, 0.01, 2))] for s in range(5)}
    choices = {(s, 0): (2 if s == 0 else 8, 6.5 if s else None) for s in range(5)}
    choices.update({(s, 3): (8, 7.0) for s in range(5)})
    adaptive = collected(ours, choices)
    runs, sweep = run_means(adaptive, METRIC), run_means(collected(fixed), METRIC)
    summary = kv.adaptive_summary(runs, sweep, adaptive_k(adaptive), METRIC, "x")
    per_run = {s: np.mean(v[1:]) for (_, s), v in ours.items()}
    a = np.array([per_run[s] for s in range(5)])
    assert summary.adaptive.mean == pytest.approx(a.mean())
    half = stats.t.ppf(0.975, 4) * a.std(ddof=1) / np.sqrt(5)
    assert summary.adaptive.ci95 == pytest.approx([a.mean() - half, a.mean() + half], rel=1e-3)
    b = np.array([np.mean(fixed[(8, s)][1:]) for s in range(5)])
    assert summary.best_fixed_K == 8 and summary.fixed["8"].mean == pytest.approx(b.mean())
    diff = summary.adaptive_minus_fixed["8"]
    assert diff["difference"] == pytest.approx(a.mean() - b.mean())
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert diff["welch_ci95"][0] <= ref.low + 1e-12 and diff["welch_ci95"][1] >= ref.high - 1e-12
    assert len(summary.K_chosen) == 10 and summary.K_chosen[0] == {
        "seed": 0,
        "step": 0,
        "K": 2.0,
        "K_star_exact": None,
        "c1": None,
        "c2": None,
        "c3": None,
        "identified": 0.0,
        "seconds": None,
    }
    assert summary.K_share_of_steps == pytest.approx({"2": 3 / 30, "8": 27 / 30})

    collected(ours, choices).to_csv(tmp_path / "adaptive.csv", index=False)
    collected(fixed).to_csv(tmp_path / "sweep.csv", index=False)
    cli = [sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / "k_validation.py"), "adaptive"]
    done = subprocess.run(
        [*cli, "adaptive.csv", "sweep.csv", "--name", "x", "--out_dir", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"summary_x.json", "k_chosen_x.csv", "adaptive_x.png"}
    done = subprocess.run(
        [*cli, "missing.csv", "sweep.csv", "--name", "x", "--out_dir", "out2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith("error:") and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"KVAL_STAGES": "adaptive", "KVAL_ADAPTIVE_START_K": "3"}, "KVAL_ADAPTIVE_START_K=3 is not in KVAL_K_LIST"),
        ({"KVAL_STAGES": "adaptive", "KVAL_ADAPTIVE_T": "0"}, "KVAL_ADAPTIVE_T=0 must be a positive integer"),
        ({"KVAL_STAGES": "adaptive", "KVAL_ADAPTIVE_EVERY": "x"}, "KVAL_ADAPTIVE_EVERY=x must be a positive integer"),
        ({"KVAL_STAGES": "adaptive", "KVAL_ADAPTIVE_SETTING": "big_mixed"}, "setting big_mixed: use POLICY_KINDS"),
        ({"KVAL_STAGES": "adapt"}, "stage adapt: use advisor, pilot, sweep, summary or adaptive"),
    ],
)
def test_k_validation_adaptive_stage_refuses_bad_settings_before_writing(tmp_path, settings, message):
    env = {**os.environ, "KVAL_WORK": str(tmp_path / "work"), "KVAL_RESULTS": str(tmp_path / "results"), **settings}
    script = ROOT / "scripts" / "k_validation.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "work").exists() and not (tmp_path / "results").exists()
