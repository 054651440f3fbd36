"""The group-size advisor's per-prompt columns (the bootstrap's units) and its estimators: c2, c3 per prompt from
its record, c1 per batch of prompts from the Gram matrix of their mean gradients g_hat(x) (each averages M oracle
group estimates, so E||g_hat||^2 = ||g||^2 + tr_oracle / M), the slope of c3 in K, and the tail of the per-prompt
c2 (Hill index, largest prompt's share).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from grpo_mse.gradients.estimators import GRPO, ORACLE
from grpo_mse.tables.records import C1BatchRecord, PromptRecord

# estimator_grams key of d_hat = x_std - x_oracle / sqrt(V (1 - V)) per prompt: the Gram matrix of std-GRPO's
# difference from its own target, which the advisor's hook keeps for grpo_std advice (analysis/measured_curve.py)
BIAS_GRAM = "grpo_std-bias"


def per_prompt_constants(record: PromptRecord) -> tuple[float, float]:
    """(c2_x, c3_x) = (K tr_oracle, K (K-1) (tr_grpo - tr_oracle)), tr_oracle less the oracle-noise bias
    ``record.oracle_noise`` when present (the oracle estimate V_hat adds Var(V_hat) tr Cov(s_bar), s_bar the
    group-mean score, to the oracle's trace)."""
    k, tr = record.K, record.tr_cov
    oracle = tr[ORACLE] - (record.oracle_noise or 0.0)
    return k * oracle, k * (k - 1) * (tr[GRPO] - oracle)


def batch_c1(weights: np.ndarray, batches: list[C1BatchRecord], position: dict, gradient: bool = False):
    """[R] c1 = mean_i W_i (||g_hat_i||^2 - tr_i / M) - mean over within-batch pairs i != j of W_i W_j <g_hat_i,
    g_hat_j>: each replicate's own prompts, grouped by the batch they were evaluated in (row 0: the data).
    With ``gradient`` also [R, n] its derivative in each prompt's weight (for ``bootstrap.influence_covariance``):
    (d_i - A)/sum W - 2 (sum_j W_j G_ij - B (S_b - W_i)) / (pairs), A, B the two means, S_b the batch's weight."""
    diag_sum, diag_mass = np.zeros(len(weights)), np.zeros(len(weights))
    cross_sum, cross_mass = np.zeros(len(weights)), np.zeros(len(weights))
    used = [batch for batch in batches if batch.n >= 2]
    parts = []
    for batch in used:
        gram = np.asarray(batch.gram, dtype=np.float64)
        cols = [position[i] for i in batch.prompt_indices]
        w = weights[:, cols]
        diag = np.diag(gram) - np.asarray(batch.within_each)
        off = gram - np.diag(np.diag(gram))
        diag_sum += w @ diag
        diag_mass += w.sum(1)
        cross_sum += np.einsum("ri,ij,rj->r", w, off, w)
        cross_mass += w.sum(1) ** 2 - (w**2).sum(1)
        parts.append((cols, w, diag, off))
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(cross_mass > 0, diag_sum / diag_mass - cross_sum / cross_mass, np.nan)
        if not gradient:
            return value
        mean_diag, mean_cross = diag_sum / diag_mass, cross_sum / cross_mass
        derivative = np.zeros_like(weights)
        for cols, w, diag, off in parts:
            pairs = w.sum(1, keepdims=True) - w  # d(pairs)/dW_i / 2 = S_b - W_i
            derivative[:, cols] += (diag[None, :] - mean_diag[:, None]) / diag_mass[:, None] - 2 * (
                w @ off - mean_cross[:, None] * pairs
            ) / cross_mass[:, None]
    return value, np.where(np.isfinite(value)[:, None], derivative, np.nan)


def slope(ks, values_by_k: np.ndarray) -> np.ndarray:
    """[R] least-squares slope of per-K values [R, n_K] against K (0 under the 1/(K(K-1)) law for c3)."""
    x = np.asarray(ks, dtype=np.float64) - np.mean(ks)
    centred = values_by_k - values_by_k.mean(1, keepdims=True)
    return centred @ x / (x @ x)


def tail_index(columns: list[np.ndarray], fraction: float = 0.1, smallest: int = 5) -> float:
    """Hill estimate of the right tail's index of the per-prompt c2 (each prompt's mean over K): with x_(1) >= ...
    the positive values and k = max(smallest, fraction T), k / sum_{i <= k} log(x_(i) / x_(k+1)); small = heavy
    (a Pareto tail of index a gives about a). nan with fewer than k + 1 positive values."""
    stacked = np.stack([np.asarray(c, dtype=np.float64) for c in columns]) if columns else np.empty((0, 0))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a prompt with no value at any K: nan, dropped
        values = np.nanmean(stacked, axis=0) if stacked.size else stacked
    values = np.sort(values[np.isfinite(values) & (values > 0)])[::-1]
    k = max(smallest, int(fraction * len(values)))
    if len(values) <= k:
        return math.nan
    logs = np.log(values[:k] / values[k]).sum()
    return float(k / logs) if logs > 0 else math.inf


def tail_share(columns: list[np.ndarray]) -> float:
    """The largest prompt's share of the summed per-prompt c2 (the oracle's MSE), the largest over K (nan if none)."""
    shares = [np.nanmax(c) / np.nansum(c) for c in columns if np.isfinite(c).any() and np.nansum(c) > 0]
    return float(max(shares)) if shares else math.nan
