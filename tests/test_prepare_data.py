"""Policy_Optimization/prepare_data.py: VERL parquet schema for arithmetic, GSM8K and MATH sources."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from grpo_mse.rewards.rules import score
from grpo_mse.training.data import arithmetic_splits, gsm8k_rows, math_rows

ROOT = Path(__file__).resolve().parents[1]


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
        ["--source", "gsm8k", "--train_file", str(tmp_path / "gsm_train.jsonl"),
         "--test_file", str(tmp_path / "gsm_test.jsonl"), "--out_dir", str(tmp_path / "gsm")]
    )  # fmt: skip
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
        ["--source", "math", "--train_file", str(tmp_path / "math.parquet"),
         "--test_file", str(tmp_path / "math.parquet"), "--out_dir", str(tmp_path / "math")]
    )  # fmt: skip
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
    with pytest.raises(SystemExit):
        prepare_main()(["--source", "gsm8k", "--out_dir", str(tmp_path)])
