"""The reward-rule extension point (issue 44 item 3): a new rule is one module holding its ``RewardRule`` (its
reading of a solution, its comparison, the ground truth written as an answer) plus one entry in
``rewards.rules.RULES``. A throwaway rule, written here as a module of its own, judges the rows whose data_source
starts with "words": they are scored by it, their ground truth checked by it (no other file learns it), and the
oracle run scores its samples with it; the built-in rules keep their data sources."""

import importlib
import json
import sys
import textwrap

import pytest
from conftest import BUILTIN_POLICY

from grpo_mse.commands import oracle as oracle_command
from grpo_mse.errors import DataError
from grpo_mse.rewards.rules import RULES, check_answers, row_reward, rule_for, score

THROWAWAY = '''
"""A throwaway reward rule: the answer is the response's last word, compared without case or a final period."""

from grpo_mse.rewards.rules import RewardRule

SCORED = []  # (solution, ground truth, reward) of every call


def last_word_reward(solution, gold):
    words = solution.split()
    reward = float(bool(words) and words[-1].rstrip(".").lower() == str(gold).lower())
    SCORED.append((solution, gold, reward))
    return reward


RULE = RewardRule(
    "last_word",
    last_word_reward,
    answer=lambda gold: f"It is {gold}.",
    claims=lambda source: source.startswith("words"),
)
'''
ROW = {"prompt": "Name the colour of the sky.", "ground_truth": "blue", "data_source": "words/colours"}


@pytest.fixture
def last_word_rule(tmp_path, monkeypatch):
    """The throwaway rule's module on sys.path and its one registration (undone after the test)."""
    (tmp_path / "throwaway_rule.py").write_text(textwrap.dedent(THROWAWAY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(RULES, "last_word", "throwaway_rule:RULE")
    yield importlib.import_module("throwaway_rule")  # the module written above (not a dependency)
    sys.modules.pop("throwaway_rule")  # a later test imports its own tmp_path module afresh


def test_unregistered_its_rows_fall_to_the_math_rule():
    assert rule_for("words/colours", "blue") == "math"
    assert row_reward(ROW, "It is blue.") == 0.0  # no \\boxed{} answer


def test_a_registered_rule_scores_and_checks_its_rows(last_word_rule):
    assert rule_for("words/colours", "blue") == "last_word"
    assert row_reward(ROW, "The sky is BLUE.") == 1.0 == score("words/colours", "blue", "blue")
    assert row_reward(ROW, "The sky is grey.") == 0.0
    check_answers([ROW], "t.jsonl")  # accepted: its rule's own answer scores 1
    with pytest.raises(DataError, match=r"row 1 has ground_truth 'sky blue', which the last_word reward rule"):
        check_answers([ROW, {**ROW, "ground_truth": "sky blue"}], "t.jsonl")  # no last word is two words
    # the built-in rules keep their data sources (a new rule only takes those no rule before it claims)
    assert [rule_for(s, "12") for s in ("arithmetic_x", "openai/gsm8k", "lighteval/MATH", "custom")] == [
        "arithmetic",
        "gsm8k",
        "math",
        "arithmetic",
    ]
    assert rule_for("custom", "\\pi") == "math"


@pytest.mark.slow
def test_the_oracle_run_scores_its_samples_with_the_registered_rule(tmp_path, last_word_rule):
    prompt = "Solve the arithmetic problem. Return ONLY the final integer.\n"
    rows = [
        {"id": i, "prompt": [{"role": "user", "content": prompt + q}], "ground_truth": gold, "data_source": "words"}
        for i, q, gold in ((0, "24 / 8 =", "3"), (1, "2 + 2 =", "4"))
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    flags = ["--model", BUILTIN_POLICY, "--device", "cpu", "--dtype", "fp32", "--n_oracle", "4"]
    oracle_command.main([*flags, "--dataset", str(data), "--out_dir", str(tmp_path / "v"), "--max_new_tokens", "8"])
    (table,) = (tmp_path / "v").glob("*.jsonl")
    written = [json.loads(line) for line in table.read_text().splitlines()]
    checked, sampled = last_word_rule.SCORED[:2], last_word_rule.SCORED[2:]
    assert checked == [("It is 3.", "3", 1.0), ("It is 4.", "4", 1.0)]  # check_answers: each row's written answer
    assert len(sampled) == 8  # then every sample of the run, by the rule
    assert [r["correct_count"] for r in written] == [sum(r for _, g, r in sampled if g == gold) for gold in "34"]
