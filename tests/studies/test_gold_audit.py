"""studies/audits/gold_audit.py (scripts/reward_audit.py gold): the GSM8K and MATH rules on the real golds of the
installed data (docs/real_data.md, "The reward rules on the real rows")."""

from __future__ import annotations

import json

import pytest
from one_line_checks import boundary

from grpo_mse.rewards.rules import score
from studies.audits import gold_audit, reward_audit
from studies.audits.gold_audit import changed_final_number


def test_the_final_answers_last_number_is_changed():
    assert changed_final_number("gsm8k", "3 + 4 = 7 apples, 10 pears\n#### 7") == "3 + 4 = 7 apples, 10 pears\n#### 8"
    assert changed_final_number("gsm8k", "#### 1,299") == "#### 1,300"
    text = "So $x = \\boxed{\\frac{1}{9}}$ and 5 more."
    assert changed_final_number("math", text) == "So $x = \\boxed{\\frac{1}{10}}$ and 5 more."
    assert changed_final_number("math", "\\boxed{3} then \\boxed{\\text{(C)}}") is None  # the last box has no number
    assert changed_final_number("math", "no box 7") is None and changed_final_number("gsm8k", "7") is None


def test_every_gsm8k_test_gold_parses_scores_and_its_changed_number_scores_zero(gsm8k_test_file):
    checks = gold_audit.audit("gsm8k", "test")
    assert len(checks) == 1319
    assert all(c.parsed and c.self_equal and c.solution_scores and c.changed_scores_zero for c in checks)
    assert {c.verify_parsed for c in checks} == {None}  # math-verify is the MATH rule's, not GSM8K's


def test_math_verify_ignores_a_base_subscript_and_units():
    # what the audit found on MATH-500 (records 30, 70, 71, 127, 137, 338: bases; 257, 467: units): the rule
    # scores an answer in the wrong base, or without its unit, 1; the number itself is checked
    assert score("math", "\\boxed{52_9}", "52_8") == 1.0 and score("math", "\\boxed{52}", "52_8") == 1.0
    assert score("math", "\\boxed{53_8}", "52_8") == 0.0
    assert score("math", "\\boxed{15\\mbox{ cm}^3}", "15\\mbox{ cm}^2") == 1.0
    assert score("math", "\\boxed{16\\mbox{ cm}^2}", "15\\mbox{ cm}^2") == 0.0


@pytest.mark.slow
def test_gold_command_writes_the_summary_of_a_seeded_math500_sample(gsm8k_test_file, tmp_path):
    out = tmp_path / "gold.json"
    status, stderr = boundary(
        reward_audit.main, ["gold", "math500", "--sample", "12", "--seed", "3", "--out", str(out)]
    )
    assert status == 0, stderr
    summary = json.loads(out.read_text())
    assert summary["records"] == 12 and summary["sample"] == {"n": 12, "seed": 3}
    counts = summary["counts"]
    assert counts["parsed"]["yes"] == counts["self_equal"]["yes"] == counts["solution_scores"]["yes"] == 12
    assert counts["verify_parsed"]["yes"] == 12 and summary["math500_disagreements"] == []
    assert len(summary["slowest"]) == 10 and summary["slowest"][0]["seconds"] >= summary["slowest"][-1]["seconds"]


def test_gold_refuses_a_split_the_dataset_lacks(tmp_path):
    status, stderr = boundary(reward_audit.main, ["gold", "math500", "--split", "train", "--out", str(tmp_path / "g")])
    assert status == 2 and "math --split train" in stderr
