"""Answer rules and the VERL reward function loaded by path (Policy_Optimization/reward.py)."""

from __future__ import annotations

import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grpo_mse.rewards.boxed_math import last_boxed, math_verify_equal
from grpo_mse.rewards.gsm8k import extract_gsm8k
from grpo_mse.rewards.rules import rule_for, score

REWARD_PATH = Path(__file__).resolve().parents[2] / "Policy_Optimization" / "reward.py"


def load_reward():
    spec = importlib.util.spec_from_file_location("grpo_reward_by_path", REWARD_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


CASES = [
    # arithmetic: last integer
    ("arithmetic_zero_shot", "The answer is 42", "42", 1.0),
    ("arithmetic_few_shot", "Answer: -17", -17, 1.0),
    ("arithmetic_zero_shot", "42 or maybe 41", "42", 0.0),
    ("arithmetic_zero_shot", "no digits", "3", 0.0),
    # GSM8K: the number after the last ####
    ("openai/gsm8k", "She has 3 + 4 = 7 apples.\n#### 7", "7", 1.0),
    ("openai/gsm8k", "#### 1,234", "1234", 1.0),
    ("openai/gsm8k", "#### $18.00", "18", 1.0),
    ("openai/gsm8k", "#### 5\nthen #### 6", "6", 1.0),
    ("openai/gsm8k", "The answer is 7", "7", 0.0),
    ("openai/gsm8k", "#### 8", "7", 0.0),
    # \boxed{N} without '####' scores 0, as under VERL's strict GSM8K rule the paper trained with (docs/real_data.md)
    ("openai/gsm8k", "2 + 5 = 7, so the answer is $\\boxed{7}$.", "7", 0.0),
    ("openai/gsm8k", "The answer is \\boxed{7}.\n#### 7", "7", 1.0),  # the '####' answer is what counts
    ("openai/gsm8k", "#### 7\nor rather \\boxed{8}", "7", 1.0),
    # MATH: last boxed answer, math-verify equivalence
    ("math", "So the answer is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", 1.0),
    ("math", "\\boxed{0.5}", "\\frac12", 1.0),
    ("DigitalLearningGmbH/MATH-lighteval", "\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0),
    ("math", "first \\boxed{1} then \\boxed{2}", "2", 1.0),
    ("math", "\\boxed{3}", "\\boxed{3}", 1.0),
    ("math", "\\boxed{x+1}", "1+x", 1.0),
    # math-verify is not symmetric: the gold is read first (an interval answer to an inequality gold scores 1)
    ("math", "\\boxed{(-\\infty,2)}", "x<2", 1.0),
    ("math", "\\boxed{x<2}", "(-\\infty,2)", 0.0),
    ("math", "\\boxed{3}", "4", 0.0),
    ("math", "the answer is 3", "3", 0.0),
    ("math", "\\boxed{", "3", 0.0),
    # unparsable or odd inputs give 0, never an exception
    ("math", None, "3", 0.0),
    (None, None, None, 0.0),
    ("openai/gsm8k", "#### 7", None, 0.0),
    ("math", "\\boxed{" + "(" * 5000 + "}", "1", 0.0),
]


@pytest.mark.parametrize("source,solution,gold,expected", CASES)
def test_compute_score_table(source, solution, gold, expected):
    compute_score = load_reward()
    result = compute_score(data_source=source, solution_str=solution, ground_truth=gold, extra_info={"split": "test"})
    assert isinstance(result, float) and result == expected


def test_math_verify_in_worker_threads():
    """VERL scores from executor threads, where signal-based timeouts would raise."""
    compute_score = load_reward()
    cases = [c for c in CASES if c[0] and "math" in c[0].lower()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: (compute_score(c[0], c[1], c[2]), threading.current_thread().name), cases))
    assert [r for r, _ in results] == [c[3] for c in cases]
    assert all(name != threading.main_thread().name for _, name in results)


def test_math_verify_compares_the_answer_against_the_gold_in_that_order():
    """math-verify's verify(gold, target) is not symmetric: gold x<2 accepts the interval (-inf, 2) as an answer,
    gold (-inf, 2) does not accept x<2. Swapping the arguments flips such MATH rewards (issue 58)."""
    pytest.importorskip("math_verify")
    assert math_verify_equal("(-\\infty,2)", "x<2") is True  # (predicted, gold)
    assert math_verify_equal("x<2", "(-\\infty,2)") is False
    assert math_verify_equal("x+1", "1+x") is True and math_verify_equal("1+x", "x+1") is True


def test_extractors_and_rule_dispatch():
    assert extract_gsm8k("x #### -3,000.5") == "-3000.5"
    assert extract_gsm8k("no answer") is None
    assert last_boxed("\\boxed{\\frac{a}{b}} and \\fbox{7}") == "7"
    assert last_boxed("\\boxed 5$") == "5"
    assert last_boxed("\\boxed{unbalanced") is None
    assert rule_for("arithmetic_zero_shot") == "arithmetic"
    assert rule_for("openai/gsm8k") == "gsm8k"
    assert rule_for("lighteval/MATH") == "math"
    assert rule_for("custom", "12") == "arithmetic" and rule_for("custom", "\\pi") == "math"
    assert score("arithmetic_zero_shot", "7", "7") == 1.0


def test_verl_loads_reward_by_path():
    pytest.importorskip("verl")
    from verl.utils.import_utils import load_extern_object

    compute_score = load_extern_object(module_path=str(REWARD_PATH), object_name="compute_score")
    assert compute_score(data_source="arithmetic_zero_shot", solution_str="= 12", ground_truth="12") == 1.0
