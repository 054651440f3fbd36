"""The BCa interval of the joint prompt bootstrap against Efron's formulas written out here (issue 58: written
from mutation survivors of ``bca_levels``, ``interval`` and ``studentized_interval``; the module's other
survivors are in test_bootstrap_survivors.py and test_bootstrap_survivors_2.py).

- ``bca_levels`` are Phi(z0 + (z0 + z) / (1 - a (z0 + z))) at z = Phi^-1((1 -+ level) / 2), with
  z0 = Phi^-1(share of replicates below the estimate, a tie counting half) and Efron's acceleration
  a = sum u^3 / (6 (sum u^2)^1.5), u_i = mean of the jackknife values - the i-th; a = 0 when they are all equal.
  Plain percentile levels where z0 is infinite (every replicate on one side of the estimate).
- ``interval`` of a weighted mean takes those levels' quantiles of its bootstrap rows (the smallest replicate whose
  share at or below it reaches the level), the acceleration from leave-one-out means computed here from the data,
  widened to hold the estimate; undefined replicates are left out up to half of them (None beyond), read from
  nan or None; an undefined estimate gives the plain percentile interval.
- ``studentized_interval`` stays on the natural scale unless asked for the log scale.
"""

import math

import numpy as np
import pytest
from scipy.stats import norm

from grpo_mse.analysis import bootstrap


def efron_levels(estimate: float, boot, jackknife, level: float) -> tuple[float, float]:
    """BCa percentile levels from Efron (1987) / Efron and Tibshirani (1993, eq. 14.10 and 14.15)."""
    boot, jackknife = np.asarray(boot, dtype=np.float64), np.asarray(jackknife, dtype=np.float64)
    share = np.mean(boot < estimate) + 0.5 * np.mean(boot == estimate)
    z0 = norm.ppf(share)
    u = jackknife.mean() - jackknife
    a = 0.0 if np.ptp(jackknife) == 0 else np.sum(u**3) / (6 * np.sum(u**2) ** 1.5)
    z = norm.ppf([(1 - level) / 2, (1 + level) / 2])
    low, high = norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
    return float(low), float(high)


def quantile_at(values, level: float) -> float:
    """The smallest value whose share of values at or below it reaches ``level``."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    return float(ordered[max(math.ceil(level * len(ordered)) - 1, 0)])


# Replicates with two ties at the estimate 0.1 (the resamples that draw each prompt once), skewed leave-one-out
# values whose spread is small (sum u^2 < 1), and a set of equal ones.
BOOT = [0.02, 0.05, 0.1, 0.1, 0.12, 0.16, 0.2, 0.31, 0.05, 0.09]
SKEWED = [0.09, 0.095, 0.1, 0.14]


@pytest.mark.parametrize(
    "jackknife, level", [(SKEWED, 0.95), (SKEWED, 0.8), ([0.3, -0.1, 0.2, 0.05, 2.0], 0.9), ([2.0, 2.0, 2.0], 0.95)]
)
def test_bca_levels_follow_efrons_formulas(jackknife, level):
    expected = efron_levels(0.1, BOOT, jackknife, level)
    assert bootstrap.bca_levels(0.1, np.array(BOOT), np.array(jackknife), level) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("estimate", [0.01, 0.4, math.inf])
def test_bca_levels_are_plain_percentiles_beside_every_replicate(estimate):
    """Every replicate above (or below) the estimate makes z0 infinite: the plain percentile levels, no error."""
    assert bootstrap.bca_levels(estimate, np.array(BOOT), np.array(SKEWED), 0.9) == pytest.approx((0.05, 0.95))


def mean_draws(x, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    weights = bootstrap.prompt_weights(len(x), n_boot, seed)
    return bootstrap.weighted_mean(weights, x), weights


X = np.array([3.5, 0.1, 0.4, 0.2, 0.3, 0.25])  # one large prompt, the first: a skewed mean, a and z0 far from 0


@pytest.mark.parametrize("level", [0.95, 0.7])
def test_interval_of_a_mean_is_its_bca_interval_by_hand(level):
    n_boot = 300
    draws, weights = mean_draws(X, n_boot, seed=4)  # its first replicate moves the 95% interval's end
    estimate, boot = X.mean(), draws[1 : 1 + n_boot]
    leave_one_out = (X.sum() - X) / (len(X) - 1)
    low, high = efron_levels(estimate, boot, leave_one_out, level)
    expected = [min(quantile_at(boot, low), estimate), max(quantile_at(boot, high), estimate)]
    assert bootstrap.interval(draws, weights, level) == pytest.approx(expected, rel=1e-12)


def test_interval_leaves_out_undefined_replicates_up_to_half():
    n_boot = 10
    draws, weights = mean_draws(X, n_boot, seed=5)
    leave_one_out = (X.sum() - X) / (len(X) - 1)
    half = draws.copy()
    half[[1, 3, 4, 7, 10]] = np.nan
    kept = half[1 : 1 + n_boot][~np.isnan(half[1 : 1 + n_boot])]
    low, high = efron_levels(X.mean(), kept, leave_one_out, 0.95)
    expected = [min(quantile_at(kept, low), X.mean()), max(quantile_at(kept, high), X.mean())]
    assert bootstrap.interval(half, weights) == pytest.approx(expected, rel=1e-12)
    as_none = [None if np.isnan(v) else float(v) for v in half]  # None reads as an undefined replicate too
    assert bootstrap.interval(as_none, weights) == pytest.approx(expected, rel=1e-12)
    more = half.copy()
    more[2] = np.nan  # six of ten undefined
    assert bootstrap.interval(more, weights) is None


def test_interval_of_an_undefined_estimate_is_the_percentile_interval():
    n_boot = 50  # the tails' shares, 1.25 and 48.75 replicates, are no whole number: no rounding at a step
    draws, weights = mean_draws(X, n_boot, seed=7)
    draws[0] = np.nan
    boot = draws[1 : 1 + n_boot]
    expected = [quantile_at(boot, 0.025), quantile_at(boot, 0.975)]
    assert expected[0] < expected[1]
    assert bootstrap.interval(draws, weights) == pytest.approx(expected, rel=1e-12)


def test_studentized_interval_is_on_the_natural_scale_by_default():
    """[T - t_hi se, T - t_lo se] with t_r = (T_r - T) / se_r, T the mean of positive values and se its textbook
    standard error sqrt(sum w (x - mean)^2 / (n (n - 1))), n = sum w."""
    n_boot = 30
    means, weights = mean_draws(X, n_boot, seed=11)
    n = weights.sum(1)
    errors = np.sqrt((weights * (X - means[:, None]) ** 2).sum(1) / (n * (n - 1)))
    t = (means[1 : 1 + n_boot] - means[0]) / errors[1 : 1 + n_boot]
    t_low, t_high = np.quantile(t, [0.025, 0.975])
    expected = [means[0] - t_high * errors[0], means[0] - t_low * errors[0]]
    assert bootstrap.studentized_interval(means, errors, weights) == pytest.approx(expected, rel=1e-12)


def test_equal_jackknife_values_have_no_acceleration():
    """Equal leave-one-out values have no skewness (a = 0), also where their float mean rounds off the value: the
    equal one-ulp spreads left then are rounding, not skewness (they gave a = 1 / (6 sqrt(n)), 0.03 here)."""
    jackknife = np.full(30, 3.2155563455066574)
    assert jackknife.mean() != jackknife[0]  # the case in point
    expected = efron_levels(0.1, BOOT, jackknife, 0.95)
    assert bootstrap.bca_levels(0.1, np.array(BOOT), jackknife, 0.95) == pytest.approx(expected, rel=1e-9)
