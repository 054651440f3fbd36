"""calculate_oracle_v.py measures the continuations' lengths and says how many reached --max_new_tokens without
an end token (issue 56): on GSM8K a 32-token limit cuts every answer of a real model, and the cut answers score 0
with no other sign."""

import json

from conftest import BUILTIN_POLICY

from grpo_mse.config.gradient_evaluation import OracleConfig
from grpo_mse.runs.oracle import ContinuationLengths, run_oracle


def test_lengths_and_the_cut_share():
    lengths = ContinuationLengths(limit=4, eos_ids=(0,))
    for continuation in ([5, 6, 0], [5, 6, 7, 0], [5, 6, 7, 8], [5, 6, 7, 8], [1]):
        lengths.add(continuation)
    assert lengths.lengths == [3, 4, 4, 4, 1] and lengths.cut == 2  # a 4-token continuation ending in EOS ended
    line = lengths.line()
    assert "median 4, 90th percentile 4, longest 4" in line
    assert "2 of 5 (40%) reached --max_new_tokens 4 without ending; their answers are cut" in line
    assert ContinuationLengths(4, (0,)).line() is None


def test_the_oracle_run_counts_what_it_sampled(tmp_path):
    rows = [{"id": i, "prompt": f"What is {i} + {i + 1}?", "ground_truth": str(2 * i + 1)} for i in range(3)]
    table = tmp_path / "rows.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = {"model": BUILTIN_POLICY, "device": "cpu", "dtype": "fp32", "dataset": str(table), "n_oracle": 5}
    short = run_oracle(OracleConfig(**common, max_new_tokens=1, out_dir=str(tmp_path / "a")))
    assert short.lengths.lengths == [1] * 15
    long = run_oracle(OracleConfig(**common, max_new_tokens=24, out_dir=str(tmp_path / "b")))
    assert len(long.lengths.lengths) == 15 and max(long.lengths.lengths) <= 24
    # the tiny policy answers in a few tokens then ends: one token cuts nearly all, 24 cut none
    assert short.lengths.cut >= 10 and long.lengths.cut == 0 and max(long.lengths.lengths) < 24
