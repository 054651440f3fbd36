"""scripts/memory_plan_peak.py: reads a run's printed plan (N, and W when printed) and its measured peak, and runs
run_tracecov.py for real for each case."""

import json
import os

import pytest
from conftest import BUILTIN_POLICY, load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_plan_line_s_likely_and_most_peaks_are_read_apart():
    bench = load_script("scripts/memory_plan_peak.py")
    with_most = (
        "memory: about 8.95 GB needed, 24.9 GB available host memory (model and libraries 1.49, gradients and "
        "statistics 6.47 with 4 rows kept, c1 3.95 for 2 mean gradients in memory; at most 9.94 if every group's "
        "rewards differ)\nK=4 ...\nmemory: peak 10.2 GB (estimated 8.95 GB)\n"
    )
    assert bench.plan_and_peak(with_most) == (8.95, 9.94, 10.2)
    without = "memory: about 0.431 GB needed, 24.5 GB available (c1 0 for 0 mean gradients in memory)\n"
    assert bench.plan_and_peak(without + "memory: peak 0.531 GB (estimated 0.431 GB)") == (0.431, 0.431, 0.531)


@pytest.mark.slow
def test_each_case_is_a_real_run_with_its_plan_and_peak(tmp_path):
    bench = load_script("scripts/memory_plan_peak.py")
    table = os.path.join(ROOT, "results", "demo", "oracle_v_n256_tiny_policy_20261201_225502.jsonl")
    out = tmp_path / "plan.json"
    argv = ["--model", BUILTIN_POLICY, "--oracle_table", table, "--T", "2", "--M", "2", "--K_list", "2"]
    bench.main([*argv, "--dtypes", "fp32", "--threads", "1", "--out", str(out)])
    cases = json.loads(out.read_text())["cases"]
    assert [(c["dtype"], c["advisor"]) for c in cases] == [("fp32", True), ("fp32", False)]
    for case in cases:
        (run,) = case["runs"]
        assert 0 < run["printed_gb"] <= run["most_gb"] and run["peak_gb"] > 0 and run["wall_s"] > 0
        assert run["printed_over_peak"] == pytest.approx(run["printed_gb"] / run["peak_gb"])
