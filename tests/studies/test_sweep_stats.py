"""studies.advisor.sweep_stats: rank correlation, Welch intervals, the predicted budgeted error and the best-K
bootstrap, against scipy and exact answers."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from studies.advisor import sweep_stats


def test_ranks_average_ties_and_spearman_matches_scipy():
    assert sweep_stats.ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 4, size=6).astype(float)  # ties on purpose
        y = rng.normal(size=6)
        if np.unique(x).size > 1:
            assert sweep_stats.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert sweep_stats.spearman([1, 2, 3, 4], [10, 5, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(sweep_stats.spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(sweep_stats.spearman([1, 2], [5, 3]))  # two points always give -1 or 1: no evidence


def test_welch_interval_matches_scipy():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.2, 0.02, size=8), rng.normal(0.17, 0.05, size=8)
    lo, hi = sweep_stats.welch_interval(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    # t975 is tabulated for whole degrees of freedom (floor of Welch's df): a little wider than scipy's
    assert lo <= ref.low + 1e-12 and hi >= ref.high - 1e-12
    assert (hi - lo) == pytest.approx(ref.high - ref.low, rel=0.03)
    assert (lo + hi) / 2 == pytest.approx(a.mean() - b.mean())


def test_predicted_error_is_minimised_next_to_k_star():
    pred = {"c1": 15.0, "c2": 160.0, "c3": 380.0}
    k_star = 1 + math.sqrt(pred["c3"] / pred["c1"])
    ks = np.arange(2, 40)
    errors = [sweep_stats.predicted_error(pred, k) for k in ks]
    assert abs(ks[int(np.argmin(errors))] - k_star) < 1
    assert sweep_stats.predicted_error(pred, 4) == pytest.approx(15 * 4 + 160 + 380 / 3)


def runs_of(values: dict) -> pd.DataFrame:
    """Per-run metrics as run_metric returns them: {K: [value per seed]}."""
    return pd.DataFrame([{"K": k, "seed": s, "value": v} for k, vs in values.items() for s, v in enumerate(vs)])


def test_best_k_bootstrap_resamples_seeds_within_each_k():
    # K=2 seeds [0, 1]: a resampled mean of 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4; K=4 always 0.5.
    # Ties go to the smaller K, so K=2 is best in 3/4 of the replicates.
    draws = sweep_stats.best_k_draws(runs_of({2: [0.0, 1.0], 4: [0.5, 0.5]}), n_boot=4000)
    shares = sweep_stats.best_k_shares(draws)
    assert set(shares) == {"2", "4"} and shares["2"] == pytest.approx(0.75, abs=0.03)
    assert sum(shares.values()) == pytest.approx(1.0)
    exact = sweep_stats.best_k_draws(runs_of({2: [0.1, 0.1], 8: [0.3, 0.3], 16: [0.2, 0.2]}), n_boot=50)
    assert sweep_stats.best_k_shares(exact) == {"8": 1.0}
