"""scripts/bench_sketched.py through its command line on the built-in policy: both engines run on the same samples,
their times, plans and peaks are saved with their ratios, every prompt's MSE is compared with the fast engine's in
units of the sketch's own error, and a run too small for some intervals (T 2) still compares."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "results", "demo", "oracle_v_n256_tiny_policy_20261201_225502.jsonl")


@pytest.mark.parametrize("t", ["2", "5"])
def test_the_comparison_of_the_two_engines_on_the_built_in_policy(tmp_path, t):
    out = tmp_path / "bench.json"
    command = [sys.executable, os.path.join(ROOT, "scripts", "bench_sketched.py"), "--model", "assets/tiny_policy"]
    command += ["--oracle_table", TABLE, "--T", t, "--M", "3", "--K_list", "2", "--sketch_flags", "--sketch_dim 4096"]
    done = subprocess.run(
        command + ["--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert report["sketch"] == {"sketch_dim": 4096, "sketch_blocks": 4, "sketch_seed": 0}
    ratios, fast, sketched = report["ratios"], runs["fast"], runs["sketched"]
    assert ratios["peak_sketched_over_fast"] == pytest.approx(sketched["peak_gb"] / fast["peak_gb"])
    assert ratios["wall_sketched_over_fast"] == pytest.approx(sketched["wall_s"] / fast["wall_s"])
    cells = report["prompts"]["cells"]
    assert len(cells) == int(t) * 3  # every prompt and estimator at the one K
    for cell in cells:
        if "t" in cell:
            assert cell["t"] == pytest.approx((cell["sketched"] - cell["fast"]) / cell["sd"])
    assert report["prompts"]["t_limit_95"] == 3.182  # R = 4 blocks: t with 3 degrees of freedom
    within = [row["fast_within_interval"] for rows in report["paired"].values() for row in rows]
    assert all(value is None or isinstance(value, bool) for value in within)  # None: no interval (T 2 may have none)
    assert t == "2" or any(isinstance(value, bool) for value in within)
    assert "sketched/fast: peak x" in done.stdout
