"""Joint prompt bootstrap: one resample of the prompts per replicate, shared by every statistic.

Replicate r gives prompt i the weight W[r, i] = how often it was drawn (multinomial, n draws from n prompts);
row 0 is the data itself (all ones). Every statistic is a function of weighted per-prompt values, so the
constants, ratios and K* of one replicate all come from the same prompts, and paired comparisons keep the
correlation of estimators evaluated on the same samples. Intervals: 2.5% / 97.5% percentiles of the replicates.
"""

from __future__ import annotations

import numpy as np


def prompt_weights(n_prompts: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """[n_boot + 1, n_prompts] draw counts; row 0 is all ones (the point estimate)."""
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n_prompts, np.full(n_prompts, 1.0 / n_prompts), size=n_boot)
    return np.vstack([np.ones((1, n_prompts)), draws]).astype(np.float64)


def weighted_mean(weights: np.ndarray, values) -> np.ndarray:
    """[R] sum_i W_ri x_i / sum_i W_ri over the prompts with a finite x_i (nan where no weight falls on one)."""
    values = np.asarray(values, dtype=np.float64)
    present = np.isfinite(values)
    mass = weights[:, present].sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mass > 0, weights[:, present] @ values[present] / np.where(mass > 0, mass, 1), np.nan)


def weighted_median(weights: np.ndarray, values) -> np.ndarray:
    """[R] lower weighted median: the smallest x_(j) whose cumulative weight reaches half the total."""
    values = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    order = np.argsort(values[keep])
    ordered, cumulative = values[keep][order], np.cumsum(weights[:, keep][:, order], axis=1)
    if not len(ordered):
        return np.full(len(weights), np.nan)
    index = (cumulative < 0.5 * cumulative[:, -1:]).sum(1)
    return ordered[np.minimum(index, len(ordered) - 1)]


def interval(draws: np.ndarray, level: float = 0.95) -> list[float] | None:
    """Percentile interval of the replicates draws[1:] (inf allowed; nan = undefined replicate, left out)."""
    values = np.asarray(draws[1:], dtype=np.float64)
    values = values[~np.isnan(values)]
    if len(values) < 0.5 * (len(draws) - 1) or not len(values):
        return None
    tail = (1 - level) / 2
    low, high = np.quantile(values, [tail, 1 - tail], method="inverted_cdf")
    return [float(low), float(high)]


def summarise(draws: np.ndarray) -> dict:
    """{"estimate": row 0, "ci95": percentile interval, "n_undefined": replicates that gave nan}."""
    draws = np.asarray(draws, dtype=np.float64)
    estimate = float(draws[0])
    return {"estimate": None if np.isnan(estimate) else estimate, "ci95": interval(draws),
            "n_undefined": int(np.isnan(draws[1:]).sum())}
