"""Joint prompt bootstrap: one resample of the prompts per replicate, shared by every statistic.

Replicate r gives prompt i the weight W[r, i] = how often it was drawn (multinomial, n draws from n prompts);
row 0 is the data itself (all ones), the last n rows leave one prompt out each (jackknife). Every statistic is a
function of weighted per-prompt values, so the constants, ratios and K* of one replicate all come from the same
prompts, and paired comparisons keep the correlation of estimators evaluated on the same samples.
Intervals: bias-corrected and accelerated (BCa; Efron 1987) percentiles of the replicates, the acceleration from
the jackknife rows; plain percentiles where BCa is undefined (e.g. infinite values).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

NORMAL = NormalDist()


def prompt_weights(n_prompts: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """[1 + n_boot + n_prompts, n_prompts]: all ones (the data), n_boot multinomial draw counts, then the
    n_prompts leave-one-out rows."""
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n_prompts, np.full(n_prompts, 1.0 / n_prompts), size=n_boot)
    jackknife = 1.0 - np.eye(n_prompts)
    return np.vstack([np.ones((1, n_prompts)), draws, jackknife]).astype(np.float64)


def n_boot_of(weights: np.ndarray) -> int:
    """Bootstrap replicates in a ``prompt_weights`` matrix."""
    return len(weights) - 1 - weights.shape[1]


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


def bca_levels(estimate: float, boot: np.ndarray, jackknife: np.ndarray, level: float) -> tuple[float, float]:
    """BCa percentile levels: Phi(z0 + (z0 + z) / (1 - a (z0 + z))) at z = Phi^-1(tail), Phi^-1(1 - tail);
    z0 = Phi^-1(share of replicates below the estimate), a = skewness of the jackknife values / 6."""
    tail = (1 - level) / 2
    below = (np.sum(boot < estimate) + 0.5 * np.sum(boot == estimate)) / len(boot)
    if not (np.isfinite(estimate) and np.isfinite(jackknife).all() and np.isfinite(boot).all() and 0 < below < 1):
        return tail, 1 - tail
    z0 = NORMAL.inv_cdf(below)
    spread = jackknife.mean() - jackknife
    denominator = 6 * float((spread ** 2).sum()) ** 1.5
    a = float((spread ** 3).sum()) / denominator if denominator > 0 else 0.0
    levels = []
    for z in (NORMAL.inv_cdf(tail), NORMAL.inv_cdf(1 - tail)):
        levels.append(NORMAL.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))
    return levels[0], levels[1]


def interval(draws: np.ndarray, weights: np.ndarray, level: float = 0.95) -> list[float] | None:
    """BCa interval from the bootstrap rows of ``draws`` (nan = undefined replicate, left out; inf allowed),
    widened if needed to contain the estimate (row 0); None when more than half the replicates are undefined."""
    if weights.shape[1] < 2:  # one prompt: every resample is the data, so no interval (reported as n/a)
        return None
    n_boot = n_boot_of(weights)
    boot, jackknife = np.asarray(draws[1:1 + n_boot], dtype=np.float64), np.asarray(draws[1 + n_boot:])
    boot = boot[~np.isnan(boot)]
    if not len(boot) or len(boot) < 0.5 * n_boot:
        return None
    estimate = float(draws[0])
    low, high = bca_levels(estimate, boot, jackknife, level)
    values = np.quantile(boot, [low, high], method="inverted_cdf")
    if np.isnan(estimate):
        return [float(values[0]), float(values[1])]
    return [min(float(values[0]), estimate), max(float(values[1]), estimate)]  # never excludes its own estimate


def summarise(draws: np.ndarray, weights: np.ndarray) -> dict:
    """{"estimate": row 0, "ci95": BCa interval, "n_undefined": bootstrap replicates that gave nan}."""
    draws = np.asarray(draws, dtype=np.float64)
    estimate = float(draws[0])
    return {"estimate": None if np.isnan(estimate) else estimate, "ci95": interval(draws, weights),
            "n_undefined": int(np.isnan(draws[1:1 + n_boot_of(weights)]).sum())}
