"""run_tracecov.py --engine sketched: the fast engine's numbers on the same samples within the sketch's own
stated error, the sketch's settings in its saved config and fingerprint (never resumed as another engine's run),
and its sketch summary against an independent computation."""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np
import pytest
from conftest import ROOT
from one_line_checks import boundary, no_tracked_change, tiny_tracecov_argv, write_table  # noqa: F401 (autouse)

from grpo_mse.commands import tracecov as tracecov_command
from grpo_mse.runs.tracecov import summary_lines
from grpo_mse.tables.records import PromptRecord, sketch_summary

DEMO_TABLE = os.path.join(ROOT, "results", "demo", "oracle_v_n256_tiny_policy_20261201_225502.jsonl")
with open(DEMO_TABLE, encoding="utf-8") as table:  # prompts the built-in policy answers right about half the time
    ROWS = [row for row in map(json.loads, table) if 0.3 < row["V_oracle"] < 0.7][:4]
NAMES = ("naive", "grpo", "oracleV")


def _run(folder, *flags):
    os.makedirs(folder)
    table, out = write_table(folder, ROWS, "jsonl"), os.path.join(folder, "out")
    argv = tiny_tracecov_argv(
        table, out, "--T", "4", "--M", "3", "--max_new_tokens", "8", "--estimators", *NAMES, "--no_advisor", *flags
    )
    code, stderr = boundary(tracecov_command.main, argv)
    assert code == 0, stderr
    return out, stderr


def _detailed(out):
    (path,) = glob.glob(os.path.join(out, "*_K2_detailed.json"))
    with open(path, encoding="utf-8") as f:
        return json.load(f)["prompt_results"]


def test_a_sketched_run_gives_the_fast_runs_mses_within_its_own_error_and_says_so(tmp_path):
    fast_out, _ = _run(str(tmp_path / "fast"))
    small = ["--engine", "sketched", "--sketch_dim", "4096", "--sketch_blocks", "4"]  # collisions: a real error
    sketched_out, _ = _run(str(tmp_path / "sketched"), *small)
    fast, sketched = _detailed(fast_out), _detailed(sketched_out)
    checked = 0
    for exact, estimate in zip(fast, sketched):
        assert exact["id"] == estimate["id"] and "sketch_mse" not in exact
        for name in NAMES:
            blocks = estimate["sketch_mse"][name]
            value = (estimate.get("mse") or estimate["tr_cov"])[name]
            assert value == pytest.approx(float(np.mean(blocks)), rel=1e-9, abs=1e-9)
            sd = float(np.std(blocks, ddof=1)) / math.sqrt(len(blocks))
            truth = (exact.get("mse") or exact["tr_cov"])[name]
            if (
                blocks == [0.0] * 4
            ):  # no gradient at all (rewards all equal to V): exactly 0, the fast engine's rounding
                assert abs(truth) < 1e-9
                continue
            assert sd > 0
            assert abs(value - truth) < 12.9 * sd  # t with 3 degrees of freedom: 99.9% two-sided
            checked += 1
    assert checked >= 4
    with open(glob.glob(os.path.join(sketched_out, "*[0-9].json"))[0], encoding="utf-8") as f:
        result = json.load(f)
    assert result["config"]["engine"] == "sketched" and result["config"]["sketch_dim"] == 4096
    assert set(result["sketch_error"]["ratio_sd"]) == {"naive/grpo", "naive/oracleV", "grpo/oracleV"}
    assert any(line.startswith("sketch (d=4096, 4 blocks, seed 0): ") for line in summary_lines(result))


def test_a_fast_runs_progress_is_not_resumed_by_a_sketched_run(tmp_path):
    folder = str(tmp_path)
    table, out = write_table(folder, ROWS, "jsonl"), os.path.join(folder, "out")
    first = tiny_tracecov_argv(table, out, "--T", "2", "--no_advisor")
    progress = os.path.join(out, "tracecov_x.progress.rank0.jsonl")
    code, stderr = boundary(tracecov_command.main, first)
    assert code == 0, stderr
    # an unfinished fast run: its progress log holds its settings
    (result,) = glob.glob(os.path.join(out, "*[0-9].json"))
    with open(result, encoding="utf-8") as f:
        saved = json.load(f)["config"]
    assert not any(name.startswith("sketch_") for name in saved)
    os.makedirs(out, exist_ok=True)
    with open(progress, "w", encoding="utf-8") as f:
        f.write(json.dumps({"config": saved}) + "\n")
    code, stderr = boundary(tracecov_command.main, first + ["--engine", "sketched", "--resume"])
    assert code == 2 and "sketch_dim (saved None, now 1048576)" in stderr


def _record(k, index, blocks):
    return PromptRecord(
        k, index, index, "p", 1, 0.5, 0.5, {n: float(np.mean(b)) for n, b in blocks.items()}, sketch_mse=blocks
    )


def test_the_sketch_summary_against_numpy():
    generator = np.random.default_rng(0)
    records = {
        k: [_record(k, i, {n: list(generator.uniform(1, 2, 4)) for n in NAMES}) for i in range(5)] for k in (2, 4)
    }
    summary = sketch_summary(records, [2, 4], NAMES)["sketch_error"]
    for position, k in enumerate((2, 4)):
        means = {n: np.mean([r.sketch_mse[n] for r in records[k]], axis=0) for n in NAMES}  # per block
        for n in NAMES:
            assert summary["sd"][n][position] == pytest.approx(np.std(means[n], ddof=1) / 2, rel=1e-12)
            values = [r.tr_cov[n] for r in records[k]]
            half = 1.959963984540054 * np.std(values, ddof=1) / math.sqrt(5)  # the run's printed half-width
            assert summary["share_of_ci95"][n][position] == pytest.approx(summary["sd"][n][position] / half, rel=1e-6)
        ratio = means["naive"] / means["oracleV"]
        assert summary["ratio_sd"]["naive/oracleV"][position] == pytest.approx(np.std(ratio, ddof=1) / 2, rel=1e-12)
    assert summary["blocks"] == 4
    records[2][0].sketch_mse = None  # an exact engine's record: no summary
    assert sketch_summary(records, [2, 4], NAMES) == {}
