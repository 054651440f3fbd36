"""error_model's vectorised helpers against row-by-row and textbook computations (found by mutation testing,
results/mutation): best_allowed_k over several replicates at once, with ties relative to each row's own scale;
slope against numpy's least-squares fit; tail_index of nothing."""

import math

import numpy as np
import pytest

from grpo_mse.analysis import error_model


def test_best_allowed_k_of_several_rows_is_each_row_s_own():
    """Row 0 has an exact tie (1*2 + 2/1 = 1*3 + 2/2) above row 1's values: the tie is judged against row 0's
    smallest value, not the smallest of all rows."""
    c1, c3, allowed = [1.0, 0.01, 5.0], [2.0, 1.0, 0.5], [2, 3, 4]
    rows = error_model.best_allowed_k(c1, c3, allowed)
    one_by_one = [error_model.best_allowed_k(a, b, allowed)[0] for a, b in zip(c1, c3)]
    assert np.isnan(rows[0]) and np.isnan(one_by_one[0])
    assert list(rows[1:]) == one_by_one[1:] == [4.0, 2.0]


def test_a_tie_is_relative_to_the_scale():
    """Values of 4e6 that differ by 1e-7 (relative 2.5e-14 < TIE) are a tie; a relative gap of 1e-9 is not."""
    assert np.isnan(error_model.best_allowed_k(1e6, 2e6 + 2e-7, [2, 3])[0])
    assert error_model.best_allowed_k(1e6, 2e6 + 0.01, [2, 3])[0] == 3


def test_one_allowed_k_with_an_undefined_constant_is_no_recommendation():
    for c1, c3 in ((math.nan, 1.0), (1.0, math.nan)):
        assert np.isnan(error_model.best_allowed_k(c1, c3, [4])[0])
    assert error_model.best_allowed_k(1.0, 1.0, [4])[0] == 4


def test_slope_is_each_row_s_least_squares_slope_against_k():
    ks = [2, 4, 8]
    values = np.array([[1.0, 2.0, 4.5], [3.0, 3.0, 3.0], [10.0, 7.0, 1.0]])
    expected = [np.polyfit(ks, row, 1)[0] for row in values]
    np.testing.assert_allclose(error_model.slope(ks, values), expected, rtol=1e-12, atol=1e-15)


def test_tail_index_of_no_columns_is_undefined():
    assert math.isnan(error_model.tail_index([]))
    assert error_model.tail_index([[1, 2, 4, 8, 16, 32, 64]]) == pytest.approx(
        error_model.tail_index([[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]])
    )


def test_paper_k_star_is_sqrt_c3_over_c1_only_where_both_are_positive():
    np.testing.assert_allclose(error_model.paper_k_star([4.0, 0.5, 0.01], [16.0, 0.5, 0.04]), [2.0, 1.0, 2.0])
    assert np.isnan(error_model.paper_k_star([0.0, 1.0, -1.0], [1.0, 0.0, 1.0])).all()


def test_tail_index_drops_zeros_and_infinities_and_needs_more_than_k_values():
    values = [1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]
    plain = error_model.tail_index([values])
    assert error_model.tail_index([values + [math.inf] + [0.0] * 100]) == plain
    assert math.isnan(error_model.tail_index([values[:5]]))  # k = 5 largest need a 6th as the threshold
    near = [1.01] * 5 + [1.0] * 3  # sum of the logs 5 log(1.01) < 1: still a finite index
    assert error_model.tail_index([near]) == pytest.approx(5 / (5 * math.log(1.01)))


def test_tail_share_is_the_largest_prompt_s_share_over_columns_with_a_positive_sum():
    assert error_model.tail_share([np.array([0.1, 0.4])]) == pytest.approx(0.8)
    assert error_model.tail_share([np.zeros(3), np.array([1.0, 3.0]), np.array([-1.0, -2.0])]) == pytest.approx(0.75)
    assert math.isnan(error_model.tail_share([np.array([-1.0, -2.0]), np.full(2, np.nan)]))
