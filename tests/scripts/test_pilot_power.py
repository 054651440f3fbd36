"""scripts/pilot_power.py: a Figure-4 run's size from its pilot. Checked against an independent computation (a plain
loop over resamples), a known answer (prompts all alike: no spread, T x M of the pilot itself suffices at any
half-width the resampling allows), and the committed SmolLM2 build-3 pilot's sizing (results/real_llm/post_trained_v3/
prediction.md: GRPO/oracle 1.235, relative standard error 0.200)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pilot_power = load_script("scripts/pilot_power.py")


def write_csv(path, mse: dict[str, list[float]], k: int = 4) -> str:
    rows = [
        {"prompt_index": i, "id": i, "K": k, "estimator": name, "trace": v, "bias2": 0.0, "mse": v}
        for name, values in mse.items()
        for i, v in enumerate(values)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def test_the_relative_se_is_the_bootstrap_of_the_ratio_of_means():
    rng = np.random.default_rng(3)
    top, bottom = rng.gamma(2.0, 3.0, 12), rng.gamma(2.0, 2.0, 12)
    ratio, rse = pilot_power.relative_se(top, bottom, 2000, seed=7)
    picks = np.random.default_rng(7).integers(0, 12, size=(2000, 12))
    loop = [top[p].sum() / bottom[p].sum() for p in picks]
    assert ratio == pytest.approx(top.sum() / bottom.sum())
    assert rse == pytest.approx(np.std(loop, ddof=1) / ratio, rel=1e-9)


def test_alike_prompts_need_no_more_than_the_pilot(tmp_path):
    path = write_csv(tmp_path / "p.csv", {"naive": [2.0] * 8, "grpo": [1.5] * 8, "oracleV": [1.0] * 8})
    out = tmp_path / "power.json"
    cli = [sys.executable, "scripts/pilot_power.py", "--per_prompt", path, "--M", "4", "--out", str(out)]
    result = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    ratios = {r["ratio"]: r for r in json.loads(out.read_text())["ratios"]}
    assert ratios["grpo/oracleV"]["value"] == pytest.approx(1.5)
    assert ratios["naive/grpo"]["value"] == pytest.approx(4 / 3)
    for r in ratios.values():
        assert r["relative_se"] == pytest.approx(0.0, abs=1e-12) and r["T_times_M_needed"] <= 1, r


def test_the_committed_smollm2_pilot_gives_its_committed_sizing():
    (csv,) = glob.glob(os.path.join(ROOT, "results/real_llm/post_trained_v3/pilot/*_per_prompt.csv"))
    mse = pilot_power.mse_table(csv)[4]
    ratio, rse = pilot_power.relative_se(mse["grpo"], mse["oracleV"], 20000, 0)
    assert round(ratio, 3) == 1.235 and round(rse, 3) == 0.200


def test_a_csv_without_the_columns_is_refused_in_one_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n")
    cli = [sys.executable, "scripts/pilot_power.py", "--per_prompt", str(path), "--M", "4"]
    result = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "prompt_index" in result.stderr
