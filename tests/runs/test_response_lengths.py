"""Every tracecov run records what sets the scale of its MSEs (issue 55, item 1): each prompt's mean response length
in generated tokens, the share ended by an EOS token and the share cut at --max_new_tokens, in the per-prompt CSV,
the per-K files and (means over prompts) the main JSON, printed in the summary; and the code's commit."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from conftest import ROOT, tracecov_argv

from grpo_mse.config.gradient_evaluation import TracecovConfig
from grpo_mse.policy.sampling import ResponseLengths, SamplingSettings
from grpo_mse.runs.tracecov import run_tracecov, summary_lines

TABLE = f"{ROOT}/results/demo/oracle_v_n256_tiny_policy_20261201_225502.jsonl"


def test_lengths_count_eos_and_cut_continuations():
    settings = SamplingSettings(eos_ids=(2, 7), pad_id=0, max_new_tokens=4)
    continuations = [[5, 2], [5, 6, 6, 6], [7], [5, 6, 6, 7], [5, 6], []]  # EOS, cut, EOS, EOS at the cap, neither x2
    lengths = ResponseLengths.of(continuations, settings)
    assert lengths == ResponseLengths(mean_new_tokens=13 / 6, share_eos=3 / 6, share_cut=1 / 6)


@pytest.mark.parametrize("cap", [2, 32])
def test_a_run_records_its_responses_lengths(tmp_path, cap):
    argv = tracecov_argv(TABLE, tmp_path, T=3, M=2, K_list=(2, 4), max_new_tokens=cap, no_advisor=[])
    outcome = run_tracecov(TracecovConfig.from_argv(argv))
    with open(outcome.csv_path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    by_prompt = {(r["K"], r["prompt_index"]): r for r in rows}  # one row per estimator; the lengths are the prompt's
    assert len(by_prompt) == 6 and len(rows) == 6 * 3
    for (k, _), row in by_prompt.items():
        tokens, eos, cut = (float(row[name]) for name in ("mean_new_tokens", "share_eos", "share_cut"))
        samples = 2 * int(k)
        assert 1 <= tokens <= cap and (tokens * samples) == pytest.approx(round(tokens * samples))
        assert eos + cut == pytest.approx(1.0)  # the tiny policy's samples end one way or the other
        assert tokens >= cap * cut + eos - 1e-12  # a cut sample has exactly cap tokens, an ended one at least 1
        assert cut == 0.0 or cap == 2  # the tiny policy's short answers never reach 32 new tokens
    lengths = outcome.result["response_lengths"]
    for i, k in enumerate((2, 4)):
        values = [float(r["mean_new_tokens"]) for (rk, _), r in by_prompt.items() if rk == str(k)]
        assert lengths["mean_new_tokens"][i] == pytest.approx(sum(values) / len(values))
    with open(f"{outcome.base}_K4_detailed.json", encoding="utf-8") as handle:
        saved = json.load(handle)["prompt_results"]
    assert [p["mean_new_tokens"] for p in saved] == [
        float(r["mean_new_tokens"]) for (k, _), r in by_prompt.items() if k == "4"
    ]
    (line,) = [text for text in summary_lines(outcome.result) if text.startswith("responses")]
    assert f"--max_new_tokens {cap}" in line and "K=4 " in line
    if cap == 32:
        assert all(share == 0.0 for share in lengths["share_cut"])
    else:
        assert any(share > 0.0 for share in lengths["share_cut"])


def test_the_main_json_records_the_codes_commit(tmp_path):
    outcome = run_tracecov(TracecovConfig.from_argv(tracecov_argv(TABLE, tmp_path, T=2, M=2, K_list=2, no_advisor=[])))
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    code = outcome.result["code"]
    if head.returncode == 0:
        assert code["commit"] == head.stdout.strip() and isinstance(code["dirty"], bool)
    else:  # not a git checkout: the package version alone
        assert code["commit"] is None and code["version"]


def test_the_v_mix_prediction_and_the_mean_over_prompts_with_0_v_1():
    """sum V / sum V (1 - V), a V = 0 prompt adding to neither sum and a V = 1 prompt to the numerator only (its
    rewards all 1: vanilla's vector is the mean score, the oracle's 0); the mean over 0 < V < 1 leaves them out."""
    from grpo_mse.tables.records import PromptRecord, equal_norm_ratio, summary

    assert equal_norm_ratio([0.0, 0.5, 1.0]) == pytest.approx(1.5 / 0.25)
    assert equal_norm_ratio([0.2, 0.2]) == pytest.approx(1 / 0.8)  # = 1 / (1 - V) at one V
    assert equal_norm_ratio([0.0, 0.0]) != equal_norm_ratio([0.0, 0.0]) and equal_norm_ratio([1.0]) == float("inf")
    names = ["naive", "grpo", "oracleV"]

    def record(index, value, mse):
        return PromptRecord(4, index, index, "p", 1, value, value, dict(zip(names, mse)))

    records = [
        record(0, 0.0, [0, 0, 0]),
        record(1, 0.5, [4, 3, 2]),
        record(2, 1.0, [6, 0, 0]),
        record(3, 0.25, [2, 1, 1]),
    ]
    result = summary({4: records}, [4], names, {"max_new_tokens": 8})
    assert result["equal_norm_ratio"]["naive/oracleV"] == pytest.approx(1.75 / (0.25 + 0.1875))
    assert result["conditional_on_x"]["naive"] == [3.0]  # all prompts, as the paper averages
    assert result["mse_0<V<1"] == {"naive": [3.0], "grpo": [2.0], "oracleV": [1.5]} and result["n_prompts_0<V<1"] == [2]
    lines = summary_lines({**result, "ci95": {n: [0.0] for n in names}})
    assert any(line.startswith("under equal score norms: naive/oracleV = sum V / sum V(1-V) = 4 ") for line in lines)
    assert any("over the 2 prompts with 0<V<1" in line and "vanilla=3 " in line for line in lines)
    inner_only = summary({4: records[1:2] + records[3:]}, [4], names, {})
    assert "mse_0<V<1" not in inner_only  # the same as the all-prompt mean: not repeated
