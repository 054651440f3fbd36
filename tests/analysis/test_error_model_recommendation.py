"""``recommendation`` (the advisor's verdict on K) against the exact error c1 K/N + c2/N + c3/(N (K - 1)) written
out here (SPEC, Theorem 7 with MSE_GRPO = MSE_oracle + 2 tr Var zeta_2 / (K (K - 1))): the printed "K near ..."
is where that error is smallest, each sign of c1, c3 leans the documented way (also for constants between 0 and
1), the verdict does not depend on the constants' scale, an interval whose lower end is 0 (or a point estimate of
0) reaches 0, a K exactly at the tolerance counts as within it, and undefined constants give no verdict (found by
mutation testing, results/mutation)."""

import math
import re

import numpy as np
import pytest

from grpo_mse.analysis import error_model

ALLOWED = [2, 4, 8, 16]
BUDGET = 64
CLEAR = [0.01, 10.0]  # a 95% interval well above 0
REACHES = [-0.01, 10.0]  # one that reaches 0


def _exact_error(c1, c2, c3, k, budget):
    return c1 * k / budget + c2 / budget + c3 / (budget * (k - 1))


def _real_argmin(c1, c3):
    """Where c1 K + c3/(K - 1) is smallest over real K > 1, on a fine grid (c1, c3 > 0)."""
    grid = np.linspace(1.0005, 30, 200_000)
    return grid[np.argmin(_exact_error(c1, 1.0, c3, grid, BUDGET))]


def _printed_k(lean: str) -> float:
    match = re.match(r"K near (\S+?),? ", lean + " ")
    assert match, lean
    return float(match.group(1))


def _no_lowercase_k(text: str) -> bool:
    """The group size is "K" everywhere the user reads it (docs, tables, messages)."""
    return re.search(r"\bk\b", text) is None


@pytest.mark.parametrize(
    ("ci_c1", "ci_c3", "caveat"),
    [
        (CLEAR, CLEAR, None),
        (REACHES, CLEAR, "c1 may be 0"),
        (CLEAR, REACHES, "c3 may be 0"),
        (REACHES, REACHES, "both c1 and c3 may be 0"),
    ],
)
def test_printed_k_is_where_the_exact_error_is_smallest(ci_c1, ci_c3, caveat):
    """With c1 = 0.25, c3 = 0.5625 (both below 1) the real minimiser of the exact error is 2.5; every lean prints
    it, with the caveat of the interval that reaches 0; only clear intervals name the best allowed K."""
    c1, c2, c3 = 0.25, 3.0, 0.5625
    rec = error_model.recommendation(c1, c2, c3, ci_c1, ci_c3, ALLOWED, BUDGET)
    assert _printed_k(rec.lean) == pytest.approx(_real_argmin(c1, c3), abs=0.01)
    assert _no_lowercase_k(rec.lean) and _no_lowercase_k(rec.message)
    if caveat is None:
        errors = [_exact_error(c1, c2, c3, k, BUDGET) for k in ALLOWED]
        assert rec.identified and rec.K_best == ALLOWED[int(np.argmin(errors))] == 2
        assert rec.message.startswith(f"best K = {rec.K_best};")
    else:
        assert caveat in rec.lean and not rec.identified and rec.K_best is None


@pytest.mark.parametrize(
    ("c1", "c3", "lean"),
    [
        (0.0, 0.0, "none"),
        (0.0, 0.5, "larger K"),
        (-0.2, 3.0, "larger K"),
        (0.5, 0.0, "smaller K"),
        (3.0, -0.2, "smaller K"),
    ],
)
def test_each_sign_of_c1_and_c3_leans_the_documented_way(c1, c3, lean):
    """c1 <= 0 < c3: the error falls with K; c3 <= 0 < c1: it rises; both <= 0: K does not matter (constants
    between 0 and 1 and exact zeros included). Never identified, whatever the intervals say."""
    rec = error_model.recommendation(c1, 2.0, c3, CLEAR, CLEAR, ALLOWED, BUDGET)
    assert rec.lean.startswith(lean + " (") and not rec.identified and rec.K_best is None
    assert _no_lowercase_k(rec.lean) and _no_lowercase_k(rec.message)
    assert rec.message.startswith("best K not identified") and f"data lean to {rec.lean};" in rec.message
    if lean == "none":
        assert "K does not change the error" in rec.lean


def test_verdict_does_not_depend_on_the_constants_scale():
    """Multiplying c1, c2, c3 (and their intervals) by s multiplies the exact error by s: the same best K and the
    same near-best set at s = 1e-8 (tiny gradients) as at s = 1 and s = 1e6."""
    c1, c2, c3 = 1.0, 0.5, 1.0  # errors at K = 2, 4, 8, 16 are 3.5, 4.83, 8.64, 16.57: K = 2, unique
    verdicts = set()
    for s in (1e-8, 1.0, 1e6):
        rec = error_model.recommendation(c1 * s, c2 * s, c3 * s, [0.5 * s, 2 * s], [0.5 * s, 2 * s], ALLOWED, BUDGET)
        verdicts.add((rec.identified, rec.K_best, tuple(rec.ties), tuple(rec.near_best_K)))
    assert verdicts == {(True, 2, (), (2,))}


@pytest.mark.parametrize(("c1", "ci_c1"), [(1.0, [0.0, 2.0]), (0.0, [0.1, 2.0])])
def test_a_zero_lower_end_or_a_zero_estimate_reaches_zero(c1, ci_c1):
    """Neither interval reaching 0 needs c1 > 0 and a lower end > 0: a lower end of exactly 0, or a point
    estimate of 0 with an interval above it, identifies nothing."""
    rec = error_model.recommendation(c1, 2.0, 1.0, ci_c1, CLEAR, ALLOWED, BUDGET)
    assert not rec.identified and rec.K_best is None


def test_a_k_exactly_at_the_tolerance_is_within_it():
    """c1 = 1, c2 = c3 = 0, N = 16: the errors K/16 at K = 2, 4, 8 are 1, 2, 4 times the smallest (exact in
    binary), so K = 4 sits exactly at tolerance 1.0 ("within 100%") and counts."""
    rec = error_model.recommendation(1.0, 0.0, 0.0, CLEAR, CLEAR, [2, 4, 8], 16, tolerance=1.0)
    assert rec.near_best_K == [2, 4]
    assert "any K <= 4 within 100% of the smallest error" in rec.message


@pytest.mark.parametrize("constants", [(math.nan, 1.0, 1.0), (1.0, math.inf, 1.0), (1.0, 1.0, None)])
def test_undefined_constants_give_no_verdict(constants):
    """Any constant undefined (nan, None) or infinite: nothing identified, empty lists, lean "undefined"."""
    rec = error_model.recommendation(*constants, CLEAR, CLEAR, ALLOWED, BUDGET)
    assert (rec.identified, rec.K_best, rec.ties, rec.near_best_K, rec.lean) == (False, None, [], [], "undefined")
    assert rec.message.startswith("best K not identified: ") and "undefined" in rec.message
    assert _no_lowercase_k(rec.message)
