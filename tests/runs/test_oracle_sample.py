"""calculate_oracle_v.py --sample: a seeded random sample of a table's rows (the advisor's prompts drawn from a
training set instead of its first rows), the same rows on a resume, refused with --limit or below 1."""

import json
import random

import pytest
from conftest import BUILTIN_POLICY, ROOT

from grpo_mse.commands import oracle as oracle_command
from grpo_mse.config.gradient_evaluation import OracleConfig
from grpo_mse.errors import UsageError

DATA = f"{ROOT}/data/arithmetic_zero_shot.jsonl"


def rows_of(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def prompts(rows):
    return sorted(json.dumps(r["prompt"]) for r in rows)


@pytest.mark.parametrize(
    "flags, message", [(["--sample", "0"], "--sample"), (["--sample", "3", "--limit", "5"], "one")]
)
def test_bad_sample_flags_are_refused(flags, message):
    with pytest.raises(UsageError, match=message):
        OracleConfig.from_argv(["--model", "m", "--dataset", "d.jsonl", *flags])


@pytest.mark.slow
def test_sample_takes_seeded_random_rows_and_resumes_them(tmp_path):
    oracle = oracle_command
    common = ["--model", BUILTIN_POLICY, "--dataset", DATA, "--device", "cpu", "--dtype", "fp32", "--n_oracle", "2"]
    common += ["--max_new_tokens", "4", "--batch_size", "8", "--sample", "4"]
    oracle.main([*common, "--seed", "5", "--out_dir", str(tmp_path / "a")])
    oracle.main([*common, "--seed", "5", "--out_dir", str(tmp_path / "a"), "--resume"])  # nothing left to do
    oracle.main([*common, "--seed", "6", "--out_dir", str(tmp_path / "b")])
    table = rows_of(DATA)
    (first,), (second,) = (list((tmp_path / d).glob("*.jsonl")) for d in ("a", "b"))
    for path, seed in ((first, 5), (second, 6)):
        assert prompts(rows_of(path)) == prompts([table[i] for i in random.Random(seed).sample(range(len(table)), 4)])
    assert prompts(rows_of(first)) != prompts(rows_of(second))
    assert prompts(rows_of(first)) != prompts(table[:4])  # not the first rows
