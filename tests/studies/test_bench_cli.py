"""The CLI benchmark runs both engines' real command lines and reports consistent numbers."""

import glob
import json
import os

import pytest

from studies.benchmarks import bench_cli as bench_cli_command

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)


def test_bench_cli_smoke(builtin_policy, tmp_path):
    bench_cli = bench_cli_command
    out = tmp_path / "cli.json"
    bench_cli.main(
        [
            "--T",
            "2",
            "--M",
            "2",
            "--K_list",
            "2",
            "--repeats",
            "1",
            "--cases",
            "few_shot",
            "--n_oracle",
            "8",
            "--max_new_tokens",
            "4",
            "--out",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    case = report["cases"]["few_shot"]
    assert set(case["seconds"]) == {"fast", "reference"} and min(case["seconds"].values()) > 0
    assert case["speedup"] == round(case["seconds"]["reference"] / case["seconds"]["fast"], 2)
    assert 0 < case["startup_seconds"] and case["repeats_identical"]
    assert case["max_rel_diff_between_engines"] < 1e-4
    assert set(report["help_seconds"]) == set(bench_cli.HELP_SCRIPTS)


def test_relative_difference_has_an_absolute_floor():
    bench_cli = bench_cli_command
    # 0.0 against 6.8e-13 in a run whose traces are ~1e-2 is rounding: not a relative difference of 1
    assert bench_cli.max_relative_difference({"grpo": [0.0, 0.02]}, {"grpo": [6.8e-13, 0.02]}) == 0.0
    # a real difference still counts, relative to the larger value
    assert abs(bench_cli.max_relative_difference({"grpo": [0.01, 0.02]}, {"grpo": [0.01, 0.03]}) - 1 / 3) < 1e-12
    assert bench_cli.max_relative_difference({"grpo": [0.0]}, {"grpo": [0.0]}) == 0.0


def test_model_is_any_local_model_the_command_lines_take(tmp_path):
    from conftest import BUILTIN_POLICY
    from gguf_files import write_gguf

    from grpo_mse.errors import UsageError

    gguf = write_gguf(BUILTIN_POLICY, str(tmp_path / "Tiny.F32.gguf"), bos=None, eos=2, pad=0)
    common = ["--cases", "few_shot", "--out", str(tmp_path / "cli.json")]
    assert bench_cli_command.parse_args(["--model", gguf, *common]).model == gguf  # was: "no config.json"
    with pytest.raises(UsageError, match="give a local model"):
        bench_cli_command.parse_args(["--model", "Qwen/Qwen2.5-0.5B-Instruct", *common])


def test_bench_dtype_runs_both_dtypes_and_pairs_their_results(tmp_path):
    """fp32 against bf16 through the command lines on the built-in policy: both dtypes' oracle values and traces
    on the same prompts, the speed ratios from the recorded seconds, each cell's fp32 interval check."""
    from conftest import BUILTIN_POLICY, ROOT

    from studies.benchmarks import bench_dtype

    out = tmp_path / "dtype.json"
    (table,) = glob.glob(os.path.join(ROOT, "results", "demo", "oracle_v_n256_tiny_policy_*.jsonl"))
    bench_dtype.main(
        ["--model", BUILTIN_POLICY, "--oracle_table", table, "--T", "3", "--M", "2", "--K_list", "2"]
        + ["--n_oracle", "4", "--max_new_tokens", "4", "--out", str(out)]
    )
    report = json.loads(out.read_text())
    seconds = report["seconds"]
    assert report["speedup_bf16"]["tracecov"] == round(seconds["tracecov_fp32"] / seconds["tracecov_bf16"], 2)
    values = report["oracle_V"]
    assert set(values["fp32"]) == set(values["bf16"]) and len(values["fp32"]) == 3
    diffs = [values["bf16"][key] - values["fp32"][key] for key in values["fp32"]]
    difference = values["bf16_minus_fp32"]
    assert abs(difference["mean_difference"] - sum(diffs) / 3) < 1e-12
    assert difference["ci95"][0] <= difference["mean_difference"] <= difference["ci95"][1]
    cells = report["traces"]["cells"]
    assert {(cell["estimator"], cell["K"]) for cell in cells} == {("naive", 2), ("grpo", 2), ("oracleV", 2)}
    assert report["within_intervals"] == all(cell["within_fp32_interval"] for cell in cells)


def test_paired_difference_known_answer():
    from studies.benchmarks.bench_dtype import paired_difference

    result = paired_difference({"a": 0.1, "b": 0.5, "c": 0.2}, {"a": 0.2, "b": 0.5, "c": 0.5, "d": 1.0})
    # differences 0.1, 0.0, 0.3 over the shared keys: mean 0.4/3, sd 0.1528, se 0.0882
    assert result["prompts"] == 3 and abs(result["mean_difference"] - 0.4 / 3) < 1e-12
    se = (((0.1 - 0.4 / 3) ** 2 + (0.4 / 3) ** 2 + (0.3 - 0.4 / 3) ** 2) / 2 / 3) ** 0.5
    assert abs(result["ci95"][1] - result["mean_difference"] - 1.959963984540054 * se) < 1e-12
