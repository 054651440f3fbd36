"""The bootstrap-t pieces, their quantiles and their interval against the definitions written out by hand
(issue 58: written from mutation survivors of analysis/bootstrap.py; test_bootstrap_survivors*.py have the others).

- ``t_quantiles``: the 95% (by default) tails of the defined t_r, linear between order statistics; a replicate at
  +-inf lies beyond every number (the lowest value whose share reaches the level, never nan); None only when more
  than half the replicates are undefined (exactly half defined is enough).
- ``studentized_pieces``: T, se and the quantiles of t_r = (T_r - T) / se_r over the bootstrap rows, natural scale
  and 95% by default; the log scale (log T, se / T) only when every defined value is > 0; a replicate with se_r = 0
  is undefined, silently; None when the data's own T or se is undefined; a replicate given as None is undefined.
- ``pieces_interval``: [T - (t_hi + d_lo) se, T - (t_lo - d_hi) se], exponentiated on the log scale, where an end
  too large for a float is +inf without a warning.
"""

import math
import warnings

import numpy as np
import pytest
from test_bootstrap_survivors import linear_quantile
from test_bootstrap_survivors_2 import WEIGHTS, mean_and_error, mean_draws

from grpo_mse.analysis import bootstrap

N_BOOT = 5  # WEIGHTS: the data, five bootstrap draws of three prompts, three jackknife rows


def bootstrap_t(estimates, errors, n_boot: int, level: float = 0.95, log: bool = False) -> list[float]:
    """[T, se, t_lo, t_hi] from the definition: t_r = (T_r - T) / se_r over bootstrap rows 1..n_boot where it is a
    number (log scale: log T and se / T in place of T and se)."""

    def scaled(value: float, error: float) -> tuple[float, float]:
        return (math.log(value), error / value) if log else (value, error)

    value, error = scaled(estimates[0], errors[0])
    t = []
    for r in range(1, 1 + n_boot):
        replicate, replicate_error = scaled(estimates[r], errors[r])
        if replicate_error != 0 and math.isfinite((replicate - value) / replicate_error):
            t.append((replicate - value) / replicate_error)
    tail = (1 - level) / 2
    return [value, error, linear_quantile(t, tail), linear_quantile(t, 1 - tail)]


def as_list(pieces: bootstrap.Pieces) -> list[float]:
    return [pieces.value, pieces.error, *pieces.t]


def lowest_reaching(values: list[float], level: float) -> float:
    """The lowest value whose share of the values at or below it reaches ``level`` (no interpolation)."""
    return sorted(values)[math.ceil(level * len(values)) - 1]


def test_t_quantiles_default_to_the_95_percent_tails_linear_between_order_statistics():
    t = np.array([0.3, -1.2, 2.5, 0.0, 4.1, -0.7, 1.9])
    assert bootstrap.t_quantiles(t, 7) == pytest.approx((linear_quantile(t, 0.025), linear_quantile(t, 0.975)))
    assert bootstrap.t_quantiles(t, 7, level=0.5) == pytest.approx((linear_quantile(t, 0.25), linear_quantile(t, 0.75)))


def test_t_quantiles_need_half_the_replicates_defined():
    assert bootstrap.t_quantiles(np.array([1.0, np.nan, 2.0, np.nan]), 4) == pytest.approx((1.025, 1.975))
    assert bootstrap.t_quantiles(np.array([1.0, np.nan, np.nan, np.nan]), 4) is None


@pytest.mark.parametrize(
    "t", [[1.0, 2.0, 3.0, math.inf], [-math.inf, 1.0, 2.0, 3.0, math.inf], [-math.inf, *range(1, 40), math.inf]]
)
def test_t_quantiles_put_infinite_replicates_beyond_every_number(t):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no nan from interpolating between a number and inf
        found = bootstrap.t_quantiles(np.array(t, dtype=np.float64), len(t))
    assert found == (lowest_reaching(t, 0.025), lowest_reaching(t, 0.975))


def test_studentized_pieces_default_to_the_95_percent_natural_scale():
    estimates, errors = mean_draws()  # means of positive values: the log scale would apply if asked for
    found = bootstrap.studentized_pieces(estimates, errors, WEIGHTS)
    assert found.scale == "natural"
    assert as_list(found) == pytest.approx(bootstrap_t(estimates, errors, N_BOOT), rel=1e-12)
    on_log = bootstrap.studentized_pieces(estimates, errors, WEIGHTS, level=0.8, log=True)
    assert on_log.scale == "log"
    assert as_list(on_log) == pytest.approx(bootstrap_t(estimates, errors, N_BOOT, 0.8, log=True), rel=1e-12)


def test_log_scale_needs_every_defined_value_positive():
    estimates, errors = mean_draws()
    estimates[3] = 0.0  # one replicate at 0: no log scale, the natural one instead
    found = bootstrap.studentized_pieces(estimates, errors, WEIGHTS, log=True)
    assert found.scale == "natural"
    assert as_list(found) == pytest.approx(bootstrap_t(estimates, errors, N_BOOT), rel=1e-12)
    estimates[3] = np.nan  # an undefined replicate does not stop the log scale
    found = bootstrap.studentized_pieces(estimates, errors, WEIGHTS, log=True)
    assert found.scale == "log"
    assert as_list(found) == pytest.approx(bootstrap_t(estimates, errors, N_BOOT, log=True), rel=1e-12)


@pytest.mark.parametrize("undefined", ["estimate", "error"])
def test_studentized_pieces_need_the_datas_own_value_and_error_not_every_replicate(undefined):
    estimates, errors = mean_draws()
    (estimates if undefined == "estimate" else errors)[1] = np.nan  # the first bootstrap replicate only
    found = bootstrap.studentized_pieces(estimates, errors, WEIGHTS)
    assert as_list(found) == pytest.approx(bootstrap_t(estimates, errors, N_BOOT), rel=1e-12)
    (estimates if undefined == "estimate" else errors)[0] = np.nan  # the data's own
    assert bootstrap.studentized_pieces(estimates, errors, WEIGHTS) is None


def test_replicates_without_a_standard_error_are_undefined_silently():
    x = [1.0, 3.0, 5.0]
    # Two draws all on one prompt (se 0): one away from the mean (t = -2/0), one on it (t = 0/0).
    weights = np.array(
        [[1, 1, 1], [3, 0, 0], [2, 1, 0], [0, 3, 0], [0, 1, 2], [1, 0, 2], [0, 1, 1], [1, 0, 1], [1, 1, 0]],
        dtype=np.float64,
    )
    estimates, errors = np.array([mean_and_error(w, x) for w in weights]).T
    assert errors[[1, 3]].tolist() == [0.0, 0.0] and estimates[3] == estimates[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a division by 0 must not reach the user as a RuntimeWarning
        found = bootstrap.studentized_pieces(estimates, errors, weights)
    assert as_list(found) == pytest.approx(bootstrap_t(estimates, errors, 5), rel=1e-12)


def test_studentized_interval_reads_none_as_an_undefined_replicate():
    estimates, errors = mean_draws()
    with_none = [None if r == 2 else float(v) for r, v in enumerate(estimates)]  # as read back from JSON
    estimates[2] = np.nan
    value, error, t_low, t_high = bootstrap_t(estimates, errors, N_BOOT)
    expected = [value - t_high * error, value - t_low * error]
    assert bootstrap.studentized_interval(with_none, errors, WEIGHTS) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("widen", [(0.0, 0.0), (0.5, 0.25)])
def test_pieces_interval_by_its_formula_an_overflowing_end_infinite_silently(widen):
    value, error, t_low, t_high = math.log(2.0), 0.5, -2000.0, 1.5
    pieces = bootstrap.Pieces(scale="log", value=value, error=error, t=[t_low, t_high])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exp(1000.7) is beyond a float: +inf, and no RuntimeWarning
        found = bootstrap.pieces_interval(pieces, widen)
    assert found == [pytest.approx(2.0 * math.exp(-(t_high + widen[0]) * error), rel=1e-12), math.inf]
    natural = bootstrap.pieces_interval(bootstrap.Pieces(scale="natural", value=2.0, error=error, t=[-4.0, 1.5]), widen)
    assert natural == pytest.approx([2.0 - (1.5 + widen[0]) * error, 2.0 + (4.0 + widen[1]) * error], rel=1e-12)
