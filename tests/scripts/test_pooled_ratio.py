"""scripts/pooled_ratio.py: the MSE ratios pooled over K (the powered runs' pre-registered test). Checked against a
plain loop over the same resamples, known answers (a constant ratio at every prompt and K; the geometric mean of
per-K ratios of means), and through the command line on a CSV run_tracecov.py's way."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from studies.audits.per_prompt import mse_table, pooled_ratio

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_csv(path, by_k: dict[int, dict[str, list[float]]]) -> str:
    rows = [
        {"prompt_index": i, "id": i, "K": k, "estimator": name, "trace": v, "bias2": 0.0, "mse": v}
        for k, mse in by_k.items()
        for name, values in mse.items()
        for i, v in enumerate(values)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def test_a_constant_ratio_and_the_geometric_mean_of_ratios_of_means(tmp_path):
    base = np.array([1.0, 5.0, 2.0, 9.0])
    table = {4: {"naive": 3 * base, "oracleV": base}, 8: {"naive": 3 * base / 2, "oracleV": base / 2}}
    result = pooled_ratio(table, "naive", "oracleV", 500, 0)
    assert result["estimate"] == pytest.approx(3.0) and result["intervals"]["0.95"] == pytest.approx([3.0, 3.0])
    table = {
        4: {"a": np.array([2.0, 4.0]), "b": np.array([1.0, 1.0])},
        8: {"a": np.array([1.0, 1.0]), "b": np.array([3.0, 1.0])},
    }
    expected = math.sqrt((3.0 / 1.0) * (1.0 / 2.0))  # per K the ratio of means, then their geometric mean
    assert pooled_ratio(table, "a", "b", 200, 1)["estimate"] == pytest.approx(expected)


def test_the_interval_is_that_of_a_plain_loop_over_the_same_resamples():
    rng = np.random.default_rng(3)
    n = 7
    table = {k: {"x": rng.gamma(2.0, k, n), "y": rng.gamma(2.0, 1.0, n)} for k in (4, 8, 16)}
    result = pooled_ratio(table, "x", "y", 1000, 11, levels=(0.9,))
    picks = np.random.default_rng(11).integers(0, n, size=(1000, n))
    loop = []
    for rows in picks:
        logs = [math.log(table[k]["x"][rows].mean() / table[k]["y"][rows].mean()) for k in (4, 8, 16)]
        loop.append(math.exp(sum(logs) / 3))
    assert result["intervals"]["0.9"] == pytest.approx(list(np.quantile(loop, [0.05, 0.95])), rel=1e-12)
    assert result["undefined_replicates"] == 0 and result["prompts"] == n


def test_the_command_line_on_a_per_prompt_csv(tmp_path):
    rng = np.random.default_rng(5)
    by_k = {
        k: {n: list(rng.gamma(2.0, 1.0, 6) * s) for n, s in (("naive", 2), ("grpo", 1.5), ("oracleV", 1))}
        for k in (4, 8)
    }
    path = write_csv(tmp_path / "run_per_prompt.csv", by_k)
    out = tmp_path / "pooled.json"
    done = subprocess.run(
        [sys.executable, "scripts/pooled_ratio.py", "--per_prompt", path, "--resamples", "300", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [p["ratio"] for p in report["pooled"]] == ["grpo/oracleV", "naive/oracleV", "naive/grpo"]
    for entry in report["pooled"]:
        top, bottom = entry["ratio"].split("/")
        assert entry["estimate"] == pytest.approx(pooled_ratio(mse_table(path), top, bottom, 300, 0)["estimate"])
        assert set(entry["intervals"]) == {"0.95", f"{1 - 0.05 / 3:g}"}
    assert "98.33%" in done.stdout


def test_per_k_intervals_are_the_runs_own_at_95_percent_and_wider_at_the_bonferroni_level():
    """The committed Qwen Figure-4 run (seed 0): from its per-prompt CSV, each K's ratio and 95% interval equal the
    ones its JSON saved (the run's own 2,000 replicates, as ``paired.run_statistics`` draws them); the 99.44%
    interval of the same replicates holds the 95% one."""
    import glob

    from studies.audits.per_prompt import per_k_ratios

    folder = os.path.join(ROOT, "results", "real_llm", "qwen_coder_05b", "figure4")
    (csv,) = glob.glob(os.path.join(folder, "*_per_prompt.csv"))
    (saved,) = glob.glob(os.path.join(folder, "*[0-9].json"))
    with open(saved, encoding="utf-8") as f:
        paired = json.load(f)["paired"]["ratio"]
    table = mse_table(csv)
    for name, cells in paired.items():
        top, bottom = name.split("/")
        rows = per_k_ratios(table, top, bottom, seed=0, levels=(0.95, 1 - 0.05 / 9))
        for row, cell in zip(rows, cells):
            assert row["estimate"] == pytest.approx(cell["estimate"], rel=1e-12)
            assert row["intervals"]["0.95"] == pytest.approx(cell["ci95"], rel=1e-12)
            low, high = row["intervals"][f"{1 - 0.05 / 9:g}"]
            assert low < cell["ci95"][0] and high > cell["ci95"][1]
