"""Group-size advisor (Theorem 7): at a fixed budget N = B*K the error bound is
c1 K/N + c2/N + c3/(N K), minimised at K* = sqrt(c3/c1).

- c2 = E_X tr Sigma_oracle(X):           per prompt K * tr_oracle
- c3 = 2 E_X tr Var(zeta_2)(X):          per prompt K (K-1) (tr_grpo - tr_oracle)
- c1 = E_X ||g(X) - E g||^2:             per batch of prompts, the trace of the between-prompt sample
  covariance of the per-prompt mean gradients g_hat(x) minus the mean of tr_oracle(x) / M
  (g_hat(x) averages M oracle-baseline group estimates, so its own variance is tr_oracle / M).
Intervals: a bootstrap over prompts for c2, c3 and over prompt batches for c1 (one model-sized
running sum per batch is all c1 needs, so prompts are grouped in batches of ``c1_batch``).
"""

from __future__ import annotations

import math

import numpy as np

from grpo_mse.gradients.statistics import SumTrace


class BetweenPromptBatch:
    """c1 for one batch of prompts from their mean gradients: S_between - mean(tr_within / M)."""

    def __init__(self, params):
        self.between = SumTrace(params)
        self.within = []

    def add(self, mean_gradient, trace_of_group_estimate: float, m: int) -> None:
        self.between.update(mean_gradient)
        self.within.append(trace_of_group_estimate / m)

    def result(self) -> dict:
        """{"n", "between", "within", "c1"} for this batch (needs at least two prompts)."""
        between = self.between.trace()
        within = float(np.mean(self.within))
        return {"n": self.between.count, "between": between, "within": within, "c1": between - within}


def per_prompt_constants(record: dict) -> tuple[float, float]:
    """(c2_x, c3_x) = (K tr_oracle, K (K-1) (tr_grpo - tr_oracle)) from one prompt's record."""
    k, tr = record["K"], record["tr_cov"]
    return k * tr["oracleV"], k * (k - 1) * (tr["grpo"] - tr["oracleV"])


def _pooled(values_by_k: list[np.ndarray]) -> float:
    """Inverse-variance weighted mean of per-K means (plain mean when a variance is unavailable)."""
    means = np.array([v.mean() for v in values_by_k])
    variances = np.array([v.var(ddof=1) / len(v) if len(v) > 1 else np.nan for v in values_by_k])
    if np.all(np.isfinite(variances)) and np.all(variances > 0):
        weights = 1 / variances
        return float((weights * means).sum() / weights.sum())
    return float(means.mean())


def k_star(c1: float, c3: float) -> float | None:
    """sqrt(c3 / c1), or None when either constant is not positive."""
    return math.sqrt(c3 / c1) if c1 > 0 and c3 > 0 else None


def advise(records_by_k: dict[int, list[dict]], batches_by_k: dict[int, list[dict]], n_boot: int = 2000,
           seed: int = 0) -> dict:
    """c1, c2, c3 per K and pooled, K* = sqrt(c3/c1), each with a bootstrap 95% interval.

    c2, c3: inverse-variance weighted means of the per-K means; c1: plain mean over all batches."""
    ks = sorted(k for k in records_by_k if records_by_k[k])
    c2 = [np.array([per_prompt_constants(r)[0] for r in records_by_k[k]]) for k in ks]
    c3 = [np.array([per_prompt_constants(r)[1] for r in records_by_k[k]]) for k in ks]
    c1 = [np.array([b["c1"] for b in batches_by_k.get(k, [])]) for k in ks]
    # c1 does not depend on K: a plain mean over every batch of every K (inverse-variance weights from a
    # few skewed batch values let a K whose batches happen to be low and tight dominate)
    c1_all = np.concatenate(c1) if any(len(v) for v in c1) else np.array([])
    point = {"c1": float(c1_all.mean()) if len(c1_all) else float("nan"), "c2": _pooled(c2), "c3": _pooled(c3)}
    point["K_star"] = k_star(point["c1"], point["c3"])
    rng = np.random.default_rng(seed)
    draws = {"c1": [], "c2": [], "c3": [], "K_star": []}
    for _ in range(n_boot):
        sample = {"c2": _pooled([v[rng.integers(0, len(v), len(v))] for v in c2]),
                  "c3": _pooled([v[rng.integers(0, len(v), len(v))] for v in c3]),
                  "c1": float(c1_all[rng.integers(0, len(c1_all), len(c1_all))].mean())
                  if len(c1_all) else float("nan")}
        star = k_star(sample["c1"], sample["c3"])
        sample["K_star"] = star if star is not None else float("nan")
        for name, value in sample.items():
            draws[name].append(value)
    intervals = {}
    for name, values in draws.items():
        values = np.array(values, dtype=float)
        finite = values[np.isfinite(values)]
        intervals[name] = ([float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))]
                           if len(finite) > n_boot // 2 else None)
    return {
        "per_K": {str(k): {"c1": float(c1[i].mean()) if len(c1[i]) else None, "c2": float(c2[i].mean()),
                           "c3": float(c3[i].mean()), "n_prompts": len(c2[i]), "n_c1_batches": len(c1[i])}
                  for i, k in enumerate(ks)},
        "pooled": point,
        "ci95": intervals,
        "note": ("Theorem 7 bound c1 K/N + c2/N + c3/(N K) at budget N; K* = sqrt(c3/c1) minimises it. "
                 "An upper bound: treat K* as a guide. c1 by batches of prompts; intervals by bootstrap."),
    }


def error_bound(c1: float, c2: float, c3: float, k, budget: float):
    """c1 K/N + c2/N + c3/(N K) (vectorised in K)."""
    k = np.asarray(k, dtype=float)
    return (c1 * k + c2 + c3 / k) / budget
