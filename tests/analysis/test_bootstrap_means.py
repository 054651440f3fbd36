"""The bootstrap's weighted means, ratios of means and prompt weights against sums written out by hand (issue 58:
written from mutation survivors of analysis/bootstrap.py; test_bootstrap_survivors*.py have the others).

- ``weighted_mean`` is sum w x / sum w over the prompts with a finite x (None or nan: left out), nan for a row
  with no weight on one, for any nonnegative weights (not only draw counts: it is unchanged when every weight
  is scaled alike).
- ``ratio_of_means`` is sum w a / sum w b over the prompts where both are defined, with the delta-method se
  sqrt(sum w (a - R b)^2 / (n (n - 1))) / (sum w b / n), n = sum w; without a denominator it is the mean and its
  textbook se; rows with n <= 1 have no se and no row's undefined value reaches the user as a RuntimeWarning.
- ``prompt_weights``: row 0 all ones, each draw row n counts summing to n, then the leave-one-out rows; the same
  seed gives the same matrix, and the default seed is the package's (paired_summary, advise: seed 0).
- ``summarise`` reads None as an undefined replicate, like nan.
"""

import math
import warnings

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap


def defined(x) -> bool:
    return x is not None and math.isfinite(x)


def mean_by_hand(w, x) -> float:
    pairs = [(wi, xi) for wi, xi in zip(w, x) if defined(xi)]
    mass = sum(wi for wi, _ in pairs)
    return sum(wi * xi for wi, xi in pairs) / mass if mass > 0 else math.nan


def ratio_by_hand(w, a, b) -> tuple[float, float]:
    """(R, se) of one weight row, over the prompts where a and b are both defined."""
    kept = [(wi, ai, bi) for wi, ai, bi in zip(w, a, b) if defined(ai) and defined(bi)]
    n = sum(wi for wi, _, _ in kept)
    bottom = sum(wi * bi for wi, _, bi in kept)
    if bottom == 0:
        return math.nan, math.nan
    ratio = sum(wi * ai for wi, ai, _ in kept) / bottom
    if n <= 1:
        return ratio, math.nan
    spread = sum(wi * (ai - ratio * bi) ** 2 for wi, ai, bi in kept)
    return ratio, math.sqrt(spread / (n * (n - 1))) / abs(bottom / n)


def assert_rows(found: np.ndarray, expected: list[float]) -> None:
    assert np.isnan(found).tolist() == [math.isnan(e) for e in expected]
    assert found[~np.isnan(found)] == pytest.approx([e for e in expected if not math.isnan(e)], rel=1e-9)


def test_weighted_mean_by_hand_over_defined_values():
    values = [2.0, None, 5.0, math.nan, -1.0]
    weights = np.vstack(
        [
            bootstrap.prompt_weights(5, 30, seed=1),
            [[0, 1, 0, 1, 0]],  # weight only on undefined prompts: no mean
            [[0.25, 0, 0.25, 0, 0]],  # fractional weights, sum 0.5
            [[0, 0, 0.5, 3, 0]],
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = bootstrap.weighted_mean(weights, values)
        scaled = bootstrap.weighted_mean(0.1 * weights, values)
    expected = [mean_by_hand(w, values) for w in weights]
    assert math.isnan(expected[-3]) and expected[-2] == 3.5 and expected[-1] == 5.0
    assert_rows(found, expected)
    assert_rows(scaled, expected)  # sum w x / sum w does not see the weights' scale


def numerator_and_denominator() -> tuple[list, list]:
    # prompts 0-2 defined in both; 3: numerator None; 4: denominator nan; 5: numerator nan; 6: denominator None
    return [1.0, 2.0, 6.0, None, 4.0, math.nan, 3.0], [1.0, 1.0, 2.0, 3.0, math.nan, 2.0, None]


def ratio_weights() -> np.ndarray:
    return np.vstack(
        [
            bootstrap.prompt_weights(7, 40, seed=5),  # its leave-one-out rows of prompts 0-2 have n = 2
            [[0.5, 0.5, 0, 0, 0, 0, 0]],  # n = 1 from two prompts: spread 0.25 > 0, still no se
            [[0, 0, 0, 1, 1, 1, 1]],  # only undefined prompts: n = 0
            [[0, 0, 2, 1, 0, 0, 0]],  # one defined prompt drawn twice: R = 3, se = 0
            [[0.75, 0.75, 0.75, 0, 0, 0, 0]],  # n = 2.25
        ]
    )


def test_ratio_of_means_by_hand_over_prompts_defined_in_both():
    a, b = numerator_and_denominator()
    weights = ratio_weights()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # n <= 1 and empty rows are nan, not a RuntimeWarning
        ratio, se = bootstrap.ratio_of_means(weights, a, b)
    expected = [ratio_by_hand(w, a, b) for w in weights]
    assert_rows(ratio, [r for r, _ in expected])
    assert_rows(se, [e for _, e in expected])
    assert ratio[0] == pytest.approx(9 / 4) and ratio[-4] == 1.5 and np.isnan(se[-4])
    assert se[-2] == 0.0
    n_prompts = len(a)
    jackknife = slice(len(weights) - 4 - n_prompts, len(weights) - 4)
    assert np.isfinite(se[jackknife][:3]).all()  # leaving out a defined prompt leaves n = 2


def test_ratio_of_means_without_denominator_is_the_mean_and_its_textbook_error():
    a, _ = numerator_and_denominator()
    weights = ratio_weights()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, se = bootstrap.ratio_of_means(weights, a)
    expected = [ratio_by_hand(w, a, [1.0] * len(a)) for w in weights]
    assert_rows(mean, [m for m, _ in expected])
    assert_rows(se, [e for _, e in expected])
    assert_rows(mean, [mean_by_hand(w, a) for w in weights])


def test_prompt_weights_rows_and_seed():
    n, n_boot = 6, 25
    weights = bootstrap.prompt_weights(n, n_boot, seed=4)
    assert weights.shape == (1 + n_boot + n, n) and weights.dtype == np.float64
    assert (weights[0] == 1).all()
    draws = weights[1 : 1 + n_boot]
    assert (draws >= 0).all() and (draws == np.round(draws)).all() and (draws.sum(1) == n).all()
    assert (weights[1 + n_boot :] == 1 - np.eye(n)).all()
    assert bootstrap.n_boot_of(weights) == n_boot
    assert (bootstrap.prompt_weights(n, n_boot, seed=4) == weights).all()
    assert (bootstrap.prompt_weights(n, n_boot, seed=5)[1 : 1 + n_boot] != draws).any()
    # the default seed is the one paired_summary and advise default to, so a script omitting it resamples alike
    assert (bootstrap.prompt_weights(n, n_boot) == bootstrap.prompt_weights(n, n_boot, seed=0)).all()


def test_summarise_reads_none_as_an_undefined_replicate():
    weights = bootstrap.prompt_weights(4, 30, seed=2)
    draws = bootstrap.weighted_mean(weights, [0.5, 3.0, 1.0, 2.0])
    undefined = [2, 7, 31]  # two bootstrap rows and a leave-one-out row (not a replicate)
    with_none = [None if r in undefined else float(v) for r, v in enumerate(draws)]
    found = bootstrap.summarise(with_none, weights)
    assert found.estimate == pytest.approx(6.5 / 4) and found.n_undefined == 2
    draws[undefined] = np.nan
    assert found == bootstrap.summarise(draws, weights)
    no_estimate = bootstrap.summarise([None, *with_none[1:]], weights)
    assert no_estimate.estimate is None and no_estimate.n_undefined == 2
