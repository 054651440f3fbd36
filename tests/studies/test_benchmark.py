"""The engine benchmark runs end to end on the built-in policy and reports consistent numbers."""

import json

import pytest

from studies.benchmarks import bench_engines as bench_engines_command

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)


def test_benchmark_smoke(builtin_policy, tmp_path):
    bench_engines = bench_engines_command

    out = tmp_path / "bench.json"
    bench_engines.main(
        ["--T", "1", "--M", "3", "--K_list", "2", "4", "--repeats", "1", "--cases", "few_shot", "--out", str(out)]
    )
    case = json.loads(out.read_text())["cases"]["few_shot"]
    assert case["memory_ratio"] <= 0.5
    assert case["max_rel_diff"] < 1e-4
    errors = case["max_rel_error_vs_float64"]
    assert 0 < errors["fast"] < 1e-4 and 0 < errors["reference"] < 1e-4  # fp32 rounding: small, not zero
    # in float64 the engines agree to rounding (HF's RMSNorm computes in float32 even in a float64 model)
    assert case["max_rel_diff_float64"] < 1e-6
    assert case["seconds"]["fast"] > 0 and case["gradient_speedup"] > 0
