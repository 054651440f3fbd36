"""The GPU machine's tools on CPU: comparing two oracle tables, the engine benchmark writing after every case."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from gpu_paths import ROOT

from studies.audits import compare_oracle_tables as compare_oracle_tables_command
from studies.benchmarks import bench_engines as bench_engines_command

# ---------------------------------------------------------------- HF vs vLLM: do two oracle tables agree?


def synthetic_table(values, n, seed):
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for index, value in enumerate(values):
        correct = int(torch.bernoulli(torch.full((n,), value), generator=generator).sum())
        rows.append(
            {
                "id": index,
                "prompt": f"{index} + 0 =",
                "ground_truth": index,
                "V_oracle": correct / n,
                "n_oracle": n,
                "correct_count": correct,
            }
        )
    return rows


def test_compare_oracle_tables(tmp_path):

    compare = compare_oracle_tables_command
    values = [0.05, 0.3, 0.5, 0.8, 0.97, 0.0, 1.0, 0.6]
    agreeing = [
        compare.compare(synthetic_table(values, 512, seed), synthetic_table(values, 512, seed + 100))
        for seed in range(20)
    ]
    assert all(report["agree"] for report in agreeing)  # same V: a 0.1% false alarm each
    shifted = [min(1.0, v + 0.08) for v in values]  # vLLM sampling another distribution, e.g. another temperature
    report = compare.compare(synthetic_table(values, 512, 1), synthetic_table(shifted, 512, 2))
    assert not report["agree"] and report["mean_interval"][1] < 0
    one_off = list(values)
    one_off[3] = 0.5  # a single prompt far off: caught by the per-prompt limit
    report = compare.compare(synthetic_table(values, 512, 1), synthetic_table(one_off, 512, 2))
    assert not report["agree"] and report["max_abs_z"] > report["z_limit_per_prompt"]
    # se uses V kept off 0 and 1: two tables with V = 0 on a prompt give z = 0, not a division by zero
    zero = compare.compare([{"id": 0, "V_oracle": 0.0, "n_oracle": 10}], [{"id": 0, "V_oracle": 0.0, "n_oracle": 10}])
    assert zero["agree"] and zero["per_prompt"][0]["z"] == 0.0
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, rows in ((a, synthetic_table(values, 512, 1)), (b, synthetic_table(shifted, 512, 2))):
        path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    result = subprocess.run(
        [sys.executable, "scripts/compare_oracle_tables.py", str(a), str(b), "--out", str(tmp_path / "r.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "DISAGREE" in result.stdout and (tmp_path / "r.json").exists()
    result = subprocess.run(
        [sys.executable, "scripts/compare_oracle_tables.py", str(a), str(tmp_path / "none.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: ")


# ---------------------------------------------------------------- bench_engines: results after every case


def test_bench_engines_writes_after_every_case(builtin_policy, tmp_path, monkeypatch):

    bench = bench_engines_command
    real_case, calls = bench.run_case, []

    def stop_at_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # e.g. gpu_check.sh's time limit
        return real_case(*args, **kwargs)

    monkeypatch.setattr(bench, "run_case", stop_at_second)
    out = tmp_path / "bench.json"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--T", "1", "--M", "3", "--K_list", "2", "--repeats", "1", "--no-float64_check", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert list(saved["cases"]) == ["zero_shot"] and saved["complete"] is False
    case = saved["cases"]["zero_shot"]
    assert case["passes"]["reference"] == 3 and case["passes"]["fast"] >= 1
    assert case["blocks_per_pass"]["fast"] == 1  # the built-in policy fits one float64 block
    assert case["seconds_per_pass"]["fast"] == pytest.approx(case["seconds"]["fast"] / case["passes"]["fast"])
