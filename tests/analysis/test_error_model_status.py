"""error_model's reading of saved advice, checked against hand values: the allowed group sizes (powers of two
that divide the budget, or the advice's own list), the saved 95% intervals, the words for a set of allowed K in
the message, and ``status`` / ``advice_status`` (what a consumer of saved advice may state)."""

import math

import pytest

from grpo_mse.analysis import error_model
from grpo_mse.errors import InputError

# c1 = 1, c3 = 9: K* = 1 + sqrt(9/1) = 4; c1 K + c3/(K - 1) is 11, 7, 9.29, 16.6 at K = 2, 4, 8, 16
CONSTANTS = {"c1": 1.0, "c2": 2.0, "c3": 9.0}
CI = {"c1": [0.5, 1.5], "c3": [4.0, 14.0]}
NO_K = "best K not identified: the advice names no allowed K that fits its budget"


@pytest.mark.parametrize(
    ("budget", "expected"),
    [(2, [2]), (3, []), (8, [2, 4, 8]), (12, [2, 4]), (24.0, [2, 4, 8]), (96, [2, 4, 8, 16, 32])],
)
def test_default_group_sizes_are_the_powers_of_two_dividing_the_budget(budget, expected):
    """No list (None or empty): every 2**j >= 2 with budget % 2**j == 0, written out by hand; the smallest
    budget, 2, allows K = 2 (one prompt of two sequences)."""
    assert error_model.allowed_group_sizes(budget) == expected
    assert error_model.allowed_group_sizes(budget, []) == expected
    assert error_model.allowed_group_sizes(budget, ()) == expected


def test_an_allowed_list_is_sorted_and_a_budget_below_two_is_refused():
    assert error_model.allowed_group_sizes(2, [2]) == [2]
    assert error_model.allowed_group_sizes(48, [16, 3, 6.0, 3]) == [3, 6, 16]
    for budget in (1, 0, 2.5, "8"):
        with pytest.raises(InputError):
            error_model.allowed_group_sizes(budget)


@pytest.mark.parametrize(
    ("saved", "expected"),
    [
        ([0.5, 1.5], [0.5, 1.5]),
        ([1.0, 1.0], [1.0, 1.0]),  # a degenerate interval (every bootstrap replicate equal) is an interval
        ([2.0, "inf"], [2.0, math.inf]),
        (["-inf", 3.0], [-math.inf, 3.0]),
        (("-inf", "inf"), [-math.inf, math.inf]),
        ([2.0, 1.0], None),  # low > high
        (["inf", "inf"], None),  # an infinite low end: no number lies above it
        (["-inf", "-inf"], None),  # an infinite high end below every number
        ([None, 1.0], None),  # an undefined end
        ([1.0, "many"], None),
        ([1.0], None),
        ([1.0, 2.0, 3.0], None),
        ("12", None),
        (None, None),
    ],
)
def test_interval_of_saved_intervals(saved, expected):
    assert error_model.interval_of(saved) == expected


@pytest.mark.parametrize(
    ("ks", "words"),
    [
        ([2, 4, 8, 16], "every allowed K"),
        ([4], "only K = 4"),
        ([16], "only K = 16"),
        ([2, 4], "any K <= 4"),
        ([2, 4, 8], "any K <= 8"),
        ([8, 16], "any K >= 8"),
        ([4, 8, 16], "any K >= 4"),
        ([4, 8], "K in [4, 8]"),  # a run inside the list touches neither end
        ([2, 8], "K in [2, 8]"),
        ([4, 16], "K in [4, 16]"),
    ],
)
def test_span_words_for_a_set_of_allowed_k(ks, words):
    """The words the message uses for the allowed K near the best (its docstring's forms), by hand."""
    assert error_model._span(ks, [2, 4, 8, 16]) == words


def test_advice_status_reads_the_advice_s_allowed_k_and_budget():
    """Saved advice with allowed_K [8, 16] at N = 64: best K = 8 (9.29 < 16.6 by hand), not 4 (the best power
    of two dividing 64); K 16's exact error (16 + 2 + 9/15) / (8 + 2 + 9/7) = 1.65 times K 8's is outside 10%."""
    advice = {"pooled": CONSTANTS, "ci95": CI, "allowed_K": [8, 16], "budget": 64}
    result = error_model.advice_status(advice)
    assert result.identified is True and result.K_best == 8
    assert result.K_star_exact == pytest.approx(4.0)
    assert result.message == "best K = 8; only K = 8 within 10% of the smallest error"
    default = error_model.advice_status({**advice, "allowed_K": None})
    assert default.K_best == 4
    assert default.message == "best K = 4; only K = 4 within 10% of the smallest error"


@pytest.mark.parametrize("budget", [9, 1, None, "inf", math.inf])
def test_status_without_an_allowed_k_says_so(budget):
    """An odd budget (no power of two divides it), one below 2, undefined or infinite: no allowed K, so nothing
    is identified and the documented one-line reason is given."""
    result = error_model.status(CONSTANTS, CI, None, budget)
    assert result == error_model.AdviceStatus(False, None, None, NO_K)
    assert error_model.advice_status({"pooled": CONSTANTS, "ci95": CI, "budget": budget}) == result
