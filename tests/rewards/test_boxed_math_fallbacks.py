"""The MATH rule's paths around math-verify (found by mutation testing, results/mutation): the light normalisation
used without math-verify or when it reads nothing, a math-verify error scored 0, and the per-answer time limit read
from GRPO_REWARD_TIMEOUT."""

import sys

import pytest

from grpo_mse.rewards import boxed_math
from grpo_mse.rewards.boxed_math import (
    MATH_VERIFY_TIMEOUT,
    MAX_ANSWER_CHARS,
    last_boxed,
    math_reward,
    math_verify_equal,
    normalise_latex,
    reward_timeout,
)


def test_normalise_latex_drops_dollars_spaces_sizing_and_a_full_stop():
    assert normalise_latex(" $\\dfrac{1}{2}$ ") == "\\frac{1}{2}"
    assert normalise_latex("x + 1") == "x+1" and normalise_latex("X+1") == "X+1"
    assert normalise_latex("\\left( 1, 2 \\right).") == "(1,2)" and normalise_latex("\\text{yes}") == "yes"
    assert normalise_latex("\\tfrac{1}{2}") == "\\frac{1}{2}" and normalise_latex("1\\!000") == "1000"
    assert normalise_latex(".5") == ".5" and normalise_latex("\\text{a} \\text{b}") == "ab"
    assert normalise_latex("2X.") == "2X"  # only the full stop goes: an answer may end in a letter


def test_without_math_verify_answers_are_compared_normalised(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # import math_verify raises ImportError
    assert math_verify_equal("$\\dfrac{1}{2}$", "\\frac{1}{2}") is True
    assert math_verify_equal("\\frac{1}{2}", "0.5") is False


def test_answers_math_verify_reads_as_nothing_are_compared_normalised():
    pytest.importorskip("math_verify")
    assert math_verify_equal("$ $", "\\!") is True  # both read as nothing, the same normalised (empty) text
    assert math_verify_equal("$ $", "3") is False


def test_a_math_verify_error_scores_zero(monkeypatch):
    math_verify = pytest.importorskip("math_verify")

    def broken(*args, **kwargs):
        raise RecursionError("sympy on an odd input")

    monkeypatch.setattr(math_verify, "verify", broken)
    assert math_verify_equal("1", "1") is False


@pytest.mark.parametrize(
    "setting,expected",
    [(None, MATH_VERIFY_TIMEOUT), ("2.5", 2.5), ("0.5", 0.5), ("0", MATH_VERIFY_TIMEOUT), ("-1", MATH_VERIFY_TIMEOUT),
     ("soon", MATH_VERIFY_TIMEOUT)],
)  # fmt: skip
def test_the_time_limit_is_a_positive_grpo_reward_timeout_or_the_default(monkeypatch, setting, expected):
    monkeypatch.delenv("GRPO_REWARD_TIMEOUT", raising=False)
    if setting is not None:
        monkeypatch.setenv("GRPO_REWARD_TIMEOUT", setting)
    assert reward_timeout() == expected and boxed_math.MATH_VERIFY_TIMEOUT not in (0.5, 2.5)


class RecordingPool:
    """Stands in for the worker pool: records each call and answers its default."""

    def __init__(self, calls: list):
        self.calls = calls

    def call(self, fn, args=(), timeout=5.0, default="no default given"):
        self.calls.append((fn, args, timeout, default))
        return default


def test_math_equal_asks_a_math_verify_worker_with_the_time_limit_and_scores_zero_by_default(monkeypatch):
    """The answer goes to the shared pool whose workers preload math-verify, with ``timeout`` or, when none is
    given, ``reward_timeout()``; a timeout, error or crash scores 0 (the default False). An answer equal to the gold
    once normalised is 1 without a worker."""
    from grpo_mse.rewards import worker_pool

    calls, pools = [], []
    monkeypatch.setattr(worker_pool, "shared_pool", lambda preload: pools.append(preload) or RecordingPool(calls))
    monkeypatch.setenv("GRPO_REWARD_TIMEOUT", "2.5")
    assert boxed_math.math_equal("$\\dfrac{1}{2}$", "\\frac{1}{2}") is True and calls == []
    assert boxed_math.math_equal("0.5", "\\frac{1}{2}") is False
    assert boxed_math.math_equal("0.5", "\\frac{1}{2}", timeout=0.25) is False
    assert calls == [
        (math_verify_equal, ("0.5", "\\frac{1}{2}"), 2.5, False),
        (math_verify_equal, ("0.5", "\\frac{1}{2}"), 0.25, False),
    ]
    assert pools == [("math_verify", "grpo_mse.rewards.boxed_math")] * 2


def test_math_reward_reads_the_boxed_answers_and_refuses_long_or_missing_ones():
    """The gold's own last boxed answer is compared (a worked solution as gold); no boxed answer, an empty gold or
    an answer longer than MAX_ANSWER_CHARS scores 0 (the longest allowed is still compared)."""
    assert math_reward("\\boxed{4}", "so the gold is \\boxed{4}, not 3") == 1.0
    assert math_reward("\\boxed{3}", "so the gold is \\boxed{4}, not 3") == 0.0
    assert math_reward("the answer is 3", "3") == 0.0 and math_reward("\\boxed{3}", " ") == 0.0
    longest = "1" * MAX_ANSWER_CHARS
    assert math_reward(f"\\boxed{{{longest}}}", longest) == 1.0  # equal once normalised: no worker needed
    assert math_reward(f"\\boxed{{{longest}1}}", longest + "1") == 0.0
    assert last_boxed("\\boxed   5$ and more") == "5"
