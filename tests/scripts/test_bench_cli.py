"""The CLI benchmark runs both engines' real command lines and reports consistent numbers."""

import json

import pytest

from grpo_mse.commands import bench_cli as bench_cli_command

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

    from grpo_mse.cli import UsageError

    gguf = write_gguf(BUILTIN_POLICY, str(tmp_path / "Tiny.F32.gguf"), bos=None, eos=2, pad=0)
    common = ["--cases", "few_shot", "--out", str(tmp_path / "cli.json")]
    assert bench_cli_command.parse_args(["--model", gguf, *common]).model == gguf  # was: "no config.json"
    with pytest.raises(UsageError, match="give a local model"):
        bench_cli_command.parse_args(["--model", "Qwen/Qwen2.5-0.5B-Instruct", *common])
