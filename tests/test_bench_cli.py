"""The CLI benchmark runs both engines' real command lines and reports consistent numbers."""

import json

import pytest
from conftest import load_script

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)


def test_bench_cli_smoke(builtin_policy, tmp_path):
    bench_cli = load_script("benchmarks/bench_cli.py")
    out = tmp_path / "cli.json"
    bench_cli.main(["--T", "2", "--M", "2", "--K_list", "2", "--repeats", "1", "--cases", "few_shot", "--n_oracle", "8",
                    "--max_new_tokens", "4", "--out", str(out)])
    report = json.loads(out.read_text())
    case = report["cases"]["few_shot"]
    assert set(case["seconds"]) == {"fast", "reference"} and min(case["seconds"].values()) > 0
    assert case["speedup"] == round(case["seconds"]["reference"] / case["seconds"]["fast"], 2)
    assert 0 < case["startup_seconds"] and case["repeats_identical"]
    assert case["max_rel_diff_between_engines"] < 1e-4
    assert set(report["help_seconds"]) == set(bench_cli.HELP_SCRIPTS)
