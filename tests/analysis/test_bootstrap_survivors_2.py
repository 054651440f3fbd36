"""The bootstrap's standard errors, studentized summaries and calibration look-ups against hand computations
(issue 58: written from mutation survivors of analysis/bootstrap.py; test_bootstrap_survivors.py has the others).

- ``mean_gradient`` is the derivative of ``weighted_mean`` in each prompt's weight (central differences), with
  undefined values (nan or None) left out; ``influence_covariance`` of it is the textbook variance of a mean,
  sum w (x - mean)^2 / (n (n - 1)), nan for a row of one draw, silently (no warning on a two-prompt jackknife).
- ``studentized_summary`` is the bootstrap-t interval worked out by hand on a three-prompt weight matrix, counts
  the undefined bootstrap rows only, reads None as nan, and says "bca" when it falls back to ``summarise``.
- ``simulated_coverage`` includes both ends of a cell's tail-index range, says why the coverage is unknown, and
  names the committed table it comes from; ``read_calibration`` keeps the path of the table it read.
"""

import json
import math
import os
import warnings

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap

X = [1.0, 2.0, 6.0]
# Three prompts: the data, five bootstrap draws (none all on one prompt, so every se > 0), the jackknife.
DRAWS = [[2, 1, 0], [0, 1, 2], [1, 0, 2], [1, 2, 0], [0, 2, 1]]
WEIGHTS = np.array([[1, 1, 1], *DRAWS, [0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=np.float64)


def mean_and_error(w, x=X) -> tuple[float, float]:
    """Weighted mean and its textbook standard error sqrt(sum w (x - mean)^2 / (n (n - 1))), n = sum w."""
    n = sum(w)
    mean = sum(wi * xi for wi, xi in zip(w, x)) / n
    return mean, math.sqrt(sum(wi * (xi - mean) ** 2 for wi, xi in zip(w, x)) / (n * (n - 1)))


def test_mean_gradient_is_the_weight_derivative_of_weighted_mean():
    values = [1.0, None, 4.0, 2.5, math.nan]  # None and nan: undefined prompts, left out
    weights = np.array([[1, 1, 1, 1, 1], [2, 0, 1, 1, 1], [0, 3, 1, 0, 1], [1, 1, 0, 3, 0]], dtype=np.float64)
    gradient = bootstrap.mean_gradient(weights, values, bootstrap.weighted_mean(weights, values))
    step = 1e-6
    for i in range(weights.shape[1]):
        up, down = weights.copy(), weights.copy()
        up[:, i] += step
        down[:, i] -= step
        numeric = (bootstrap.weighted_mean(up, values) - bootstrap.weighted_mean(down, values)) / (2 * step)
        expected = numeric if values[i] is not None and math.isfinite(values[i]) else np.zeros(len(weights))
        assert gradient[:, i] == pytest.approx(expected, abs=1e-8), i
    assert gradient[0] == pytest.approx([(1 - 2.5) / 3, 0, (4 - 2.5) / 3, 0, 0])  # (x_i - mean) / sum w


def test_influence_covariance_of_a_mean_is_its_textbook_variance_silently():
    x = [1.0, 4.0]
    weights = np.array([[1, 1], [2, 0], [1, 1], [0, 2], [0, 1], [1, 0]], dtype=np.float64)  # jackknife: n = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 1/(n - 1) at n = 1 must not reach the user as a RuntimeWarning
        derivative = bootstrap.mean_gradient(weights, x, bootstrap.weighted_mean(weights, x))
        variance = bootstrap.influence_covariance(weights, derivative)
        of_sum = bootstrap.influence_covariance(weights, np.tile(x, (len(weights), 1)))  # S = sum w x: dS = x
    expected = [mean_and_error(w, x)[1] ** 2 for w in weights[:4]]  # n = 2 in every bootstrap row
    assert variance[:4] == pytest.approx(expected, rel=1e-12)
    assert variance[0] == pytest.approx(np.var(x, ddof=1) / 2)
    assert np.isnan(variance[4:]).all()  # one draw: no variance
    assert of_sum[:4] == pytest.approx([2 * sum(wi * xi * xi for wi, xi in zip(w, x)) for w in weights[:4]])
    assert np.isnan(of_sum[4:]).all()  # undefined at n = 1 whatever the statistic


def test_influence_covariance_of_two_means_is_their_covariance():
    y = [3.0, -1.0, 0.5]
    mean_x, mean_y = bootstrap.weighted_mean(WEIGHTS, X), bootstrap.weighted_mean(WEIGHTS, y)
    found = bootstrap.influence_covariance(
        WEIGHTS, bootstrap.mean_gradient(WEIGHTS, X, mean_x), bootstrap.mean_gradient(WEIGHTS, y, mean_y)
    )
    assert found[0] == pytest.approx(np.cov(X, y)[0, 1] / 3)
    for r, w in enumerate(WEIGHTS):
        n = w.sum()
        cross = sum(wi * (a - mean_x[r]) * (b - mean_y[r]) for wi, a, b in zip(w, X, y))
        assert found[r] == pytest.approx(cross / (n * (n - 1))), r


def hand_interval(rows: list[int], widen=(0.0, 0.0)) -> list[float]:
    """Bootstrap-t interval of the mean of X from the bootstrap ``rows`` of WEIGHTS, each end moved out by widen."""
    estimate, error = mean_and_error(WEIGHTS[0])
    t = [(m - estimate) / se for m, se in (mean_and_error(WEIGHTS[r]) for r in rows)]
    t_low, t_high = np.quantile(t, [0.025, 0.975])  # numpy's default: linear between order statistics
    return [estimate - (t_high + widen[0]) * error, estimate - (t_low - widen[1]) * error]


def mean_draws() -> tuple[np.ndarray, np.ndarray]:
    pairs = np.array([mean_and_error(w) for w in WEIGHTS])
    return pairs[:, 0], pairs[:, 1]


def test_studentized_summary_natural_scale_by_hand():
    draws, errors = mean_draws()
    found = bootstrap.studentized_summary(draws, errors, WEIGHTS, widen=(0.5, 0.25))
    assert found.estimate == pytest.approx(3.0)
    assert found.ci95 == pytest.approx(hand_interval([1, 2, 3, 4, 5], (0.5, 0.25)), rel=1e-12)
    assert found.interval == "studentized" and found.pieces.scale == "natural"
    assert found.n_undefined == 0


def test_studentized_summary_counts_undefined_bootstrap_rows_and_reads_none_as_nan():
    draws, errors = mean_draws()
    undefined = [1, 5, 6]  # the first and last bootstrap rows, the first jackknife row (not a replicate)
    errors[undefined] = np.nan
    with_none = [None if r in undefined else float(v) for r, v in enumerate(draws)]
    found = bootstrap.studentized_summary(with_none, errors, WEIGHTS)
    assert found.n_undefined == 2
    assert found.ci95 == pytest.approx(hand_interval([2, 3, 4]), rel=1e-12)
    draws[undefined] = np.nan
    assert bootstrap.studentized_summary(draws, errors, WEIGHTS) == found


def test_studentized_summary_without_its_own_error_is_bca():
    draws, errors = mean_draws()
    errors[0] = np.nan
    found = bootstrap.studentized_summary(draws, errors, WEIGHTS)
    plain = bootstrap.summarise(draws, WEIGHTS)
    assert found.interval == "bca" and found.pieces is None
    assert (found.estimate, found.ci95, found.n_undefined) == (plain.estimate, plain.ci95, plain.n_undefined)


def coverage_cell(tail: str, index_range: list[float], coverage: float, mc_se: float) -> dict:
    entry = {"coverage": coverage, "mc_se": mc_se}
    return {"T": 48, "tail": tail, "runs": 200, "index_range": index_range, "coverage": dict.fromkeys(("c1",), entry)}


def test_simulated_coverage_includes_both_ends_of_a_tail_range(tmp_path):
    cells = [coverage_cell("lognormal:0", [1.5, 3.0], 0.9, 0.02), coverage_cell("pareto:3", [2.0, 4.0], 0.95, 0.01)]
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    calibration = bootstrap.read_calibration(str(path))
    assert calibration == bootstrap.Calibration(str(path), {"cells": cells})
    for index, tails, low, high in ((1.5, ["lognormal:0"], 0.9, 0.9), (4.0, ["pareto:3"], 0.95, 0.95)):
        found = bootstrap.simulated_coverage(index, 48, calibration)
        assert found.status == "calibrated", index
        assert [c["tail"] for c in found.cells] == tails
        assert found.coverage == {"c1": {"low": low, "high": high, "mc_se": 0.02 if low == 0.9 else 0.01}}
    beyond = bootstrap.simulated_coverage(4.5, 48, calibration)
    assert (beyond.status, beyond.reason) == ("unknown", "no simulated tail at T = 48 has tail index 4.5")


@pytest.mark.parametrize("index", [None, math.nan, math.inf])
def test_simulated_coverage_says_the_tail_index_is_undefined(index):
    found = bootstrap.simulated_coverage(index, 48)
    assert (found.status, found.tail_index) == ("unknown", None)
    assert found.reason == "the tail index of the per-prompt c2 is undefined"


def test_simulated_coverage_names_the_committed_table_and_its_script():
    found = bootstrap.simulated_coverage(2.0, 48)  # the committed table has cells at T = 48
    assert found.status == "calibrated"
    table, script = found.source.removesuffix(")").split(" (")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(bootstrap.__file__))))
    assert os.path.join(root, table) == bootstrap.CALIBRATION
    assert os.path.isfile(os.path.join(root, script))
