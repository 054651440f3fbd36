"""Policy_Optimization/prepare_data.py: VERL parquet schema for arithmetic, GSM8K and MATH sources."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from grpo_mse.errors import UsageError
from grpo_mse.rewards.rules import score
from grpo_mse.training.data import arithmetic_splits, gsm8k_rows, math_rows

ROOT = Path(__file__).resolve().parents[2]


def prepare_main():
    spec = importlib.util.spec_from_file_location("prepare_data", ROOT / "Policy_Optimization" / "prepare_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def check_schema(frame: pd.DataFrame, split: str) -> None:
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    for i, row in frame.iterrows():
        messages = list(row["prompt"])
        assert messages and all(set(m) == {"role", "content"} for m in messages)
        assert messages[-1]["role"] == "user" and messages[-1]["content"]
        assert row["reward_model"]["style"] == "rule" and isinstance(row["reward_model"]["ground_truth"], str)
        assert row["extra_info"]["split"] == split and row["extra_info"]["index"] == i
        assert row["ability"] == "math"


@pytest.mark.parametrize("style", ["zero_shot", "few_shot"])
def test_arithmetic_parquet(tmp_path, style):
    paths = prepare_main()(["--out_dir", str(tmp_path), "--n_train", "64", "--n_test", "16", "--style", style])
    train, test = pd.read_parquet(paths["train"]), pd.read_parquet(paths["test"])
    assert (len(train), len(test)) == (64, 16)
    check_schema(train, "train")
    check_schema(test, "test")
    assert set(train["data_source"]) == {f"arithmetic_{style}"}
    train_prompts = {m[0]["content"] for m in train["prompt"]}
    assert not train_prompts & {m[0]["content"] for m in test["prompt"]}
    for _, row in test.iterrows():  # the reward rule accepts the stored answer
        assert score(
            row["data_source"], f"= {row['reward_model']['ground_truth']}", row["reward_model"]["ground_truth"]
        )


def test_arithmetic_test_split_is_the_builtin_dataset():
    from grpo_mse.builtin.arithmetic import make_rows

    splits = arithmetic_splits(8, 5, seed=3)
    assert [r["prompt"] for r in splits["test"]] == [r["prompt"] for r in make_rows(5, 3)]


def test_gsm8k_and_math_files(tmp_path):
    gsm = [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"question": "Big?", "answer": "It is 1,000 + 234\n#### 1,234"},
    ]
    (tmp_path / "gsm_train.jsonl").write_text("\n".join(json.dumps(r) for r in gsm) + "\n")
    (tmp_path / "gsm_test.jsonl").write_text(json.dumps(gsm[0]) + "\n")
    paths = prepare_main()(
        [
            "--source",
            "gsm8k",
            "--train_file",
            str(tmp_path / "gsm_train.jsonl"),
            "--test_file",
            str(tmp_path / "gsm_test.jsonl"),
            "--out_dir",
            str(tmp_path / "gsm"),
        ]
    )
    train = pd.read_parquet(paths["train"])
    check_schema(train, "train")
    assert [r["ground_truth"] for r in train["reward_model"]] == ["7", "1234"]
    assert "####" in train["prompt"][0][0]["content"] and set(train["data_source"]) == {"openai/gsm8k"}

    math = pd.DataFrame(
        [
            {"problem": "Half of one?", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1"},
            {"problem": "Two?", "solution": "So \\boxed{2}", "answer": "2", "level": "Level 2"},
        ]
    )
    math.to_parquet(tmp_path / "math.parquet")
    paths = prepare_main()(
        [
            "--source",
            "math",
            "--train_file",
            str(tmp_path / "math.parquet"),
            "--test_file",
            str(tmp_path / "math.parquet"),
            "--out_dir",
            str(tmp_path / "math"),
        ]
    )
    test = pd.read_parquet(paths["test"])
    check_schema(test, "test")
    assert [r["ground_truth"] for r in test["reward_model"]] == ["\\frac{1}{2}", "2"]
    assert "\\boxed{}" in test["prompt"][0][0]["content"]
    assert test["extra_info"][1]["level"] == "Level 2"


def test_bad_records_and_arguments(tmp_path):
    with pytest.raises(ValueError, match="####"):
        gsm8k_rows([{"question": "q", "answer": "no marker"}], "train")
    with pytest.raises(ValueError, match="boxed"):
        math_rows([{"problem": "p", "solution": "no box"}], "train")
    # no files reads the installed GSM8K (tests/training/test_installed_data.py); one file of the two is refused
    with pytest.raises(UsageError, match="give both or none"):
        prepare_main()(["--source", "gsm8k", "--test_file", "g.jsonl", "--out_dir", str(tmp_path)])


GSM_ROW = {"question": "1+1?", "answer": "#### 2"}


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--train_file", "g.jsonl", "--test_file", "g.jsonl"], "read with --source gsm8k or --source math"),
        (["--train_file", "g.jsonl"], "--train_file are read with --source"),
        (["--limit", "3"], "--limit is for GSM8K/MATH files"),
        (["--data_source", "openai/gsm8k"], "--data_source is for GSM8K/MATH files only"),
        (
            ["--source", "gsm8k", "--train_file", "g.jsonl", "--test_file", "g.jsonl", "--n_train", "10"],
            "--n_train applies to --source arithmetic only",
        ),
        (
            [
                "--source",
                "math",
                "--train_file",
                "g.jsonl",
                "--test_file",
                "g.jsonl",
                "--style",
                "few_shot",
                "--seed",
                "1",
            ],
            "--style, --seed apply to --source arithmetic only",
        ),
    ],
)
def test_flags_of_the_other_source_are_refused_not_ignored(tmp_path, monkeypatch, flags, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.jsonl").write_text(json.dumps(GSM_ROW) + "\n")
    with pytest.raises(UsageError, match=re.escape(message)):
        prepare_main()(flags + ["--out_dir", "D"])
    assert not (tmp_path / "D").exists()


def test_other_data_in_out_dir_is_replaced_only_with_overwrite(tmp_path):
    out = tmp_path / "D"
    small = ["--out_dir", str(out), "--n_train", "8", "--n_test", "4"]
    paths = prepare_main()(small)
    before = {split: open(path, "rb").read() for split, path in paths.items()}
    assert prepare_main()(small) == paths  # the same data again: accepted, files unchanged
    assert {split: open(path, "rb").read() for split, path in paths.items()} == before
    (tmp_path / "g.jsonl").write_text(json.dumps(GSM_ROW) + "\n")
    gsm = [
        "--source",
        "gsm8k",
        "--train_file",
        str(tmp_path / "g.jsonl"),
        "--test_file",
        str(tmp_path / "g.jsonl"),
        "--out_dir",
        str(out),
    ]
    with pytest.raises(UsageError, match="already hold other data; pass --overwrite"):
        prepare_main()(gsm)
    assert {split: open(path, "rb").read() for split, path in paths.items()} == before
    prepare_main()(gsm + ["--overwrite"])
    assert [len(pd.read_parquet(path)) for path in paths.values()] == [1, 1]
    assert sorted(os.listdir(out)) == ["test.parquet", "train.parquet"]  # no temporary file left


@pytest.mark.parametrize(
    "source, field, value, kind",
    [
        ("gsm8k", "question", None, "null"),
        ("gsm8k", "question", "", "empty"),
        ("gsm8k", "question", "   ", "empty"),
        ("gsm8k", "question", 42, "a int, not text"),
        ("math", "problem", None, "null"),
        ("math", "problem", ["a", "b"], "a list, not text"),
    ],
)
def test_null_empty_or_non_text_prompts_are_refused_with_a_count(tmp_path, source, field, value, kind):
    """Issue 25 case 6: {"question": null} became the prompt "None Let's think step by step"; "" became " Let's...".
    Refused (one line: the first record, the count), nothing written; parquet input (NaN for a missing value) too."""
    good = {"gsm8k": {"question": "1+1?", "answer": "#### 2"}, "math": {"problem": "1+1?", "answer": "2"}}[source]
    records = [good, {**good, field: value}, good, {**good, field: value}]
    with pytest.raises(
        ValueError, match=rf"train record 1: '{field}' is {re.escape(kind)} \(and 1 more of 4 records\)"
    ):
        (gsm8k_rows if source == "gsm8k" else math_rows)(records, "train")
    if value is None:  # the same through prepare_data.py from a parquet file (pandas reads a missing value as None)
        path = tmp_path / "in.parquet"
        pd.DataFrame(records).to_parquet(path)
        argv = [
            "--source",
            source,
            "--train_file",
            str(path),
            "--test_file",
            str(path),
            "--out_dir",
            str(tmp_path / "o"),
        ]
        with pytest.raises(ValueError, match=f"'{field}' is null"):
            prepare_main()(argv)
        assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_a_saved_dataset_folder_is_refused_as_a_folder_not_as_missing(tmp_path, monkeypatch):
    """Issue 36, case 3: a `datasets` save_to_disk folder was refused with "file not found" although it exists."""
    from datasets import Dataset

    monkeypatch.chdir(tmp_path)
    Dataset.from_list([GSM_ROW]).save_to_disk("inputs/ds_gsm_raw")
    (tmp_path / "g.jsonl").write_text(json.dumps(GSM_ROW) + "\n")
    (tmp_path / "plain").mkdir()
    for train, test, expected in (
        ("inputs/ds_gsm_raw", "g.jsonl", "--train_file inputs/ds_gsm_raw is a saved `datasets` folder, not a file"),
        ("g.jsonl", "inputs/ds_gsm_raw", "--test_file inputs/ds_gsm_raw is a saved `datasets` folder, not a file"),
        ("plain", "g.jsonl", "--train_file plain is a folder, not a file"),
        ("nowhere.jsonl", "g.jsonl", "--train_file nowhere.jsonl: file not found"),
    ):
        argv = ["--source", "gsm8k", "--train_file", train, "--test_file", test, "--out_dir", "D"]
        with pytest.raises(ValueError, match=re.escape(expected)) as refused:
            prepare_main()(argv)
        assert ("not found" in str(refused.value)) == (train == "nowhere.jsonl") and "\n" not in str(refused.value)
    assert not (tmp_path / "D").exists()
