"""Group-size advisor (Theorem 7). At a budget of N = B K sequences per step (B prompts, one group of K each)
the GRPO gradient's error is exactly

    E||g_hat - grad J||^2 = (K/N) (c1 + E_X MSE_GRPO(X, K)) = c1 K/N + c2/N + c3/(N (K - 1)),

- c1 = E_X ||g(X) - E g||^2,  c2 = E_X sigma_O^2(X) = E_X K tr Cov_oracle,
- c3 = 2 E_X tr Var zeta_2(X) = E_X K (K - 1) (tr Cov_GRPO - tr Cov_oracle),

minimised over real K at K* = 1 + sqrt(c3/c1) (``k_star``). The paper's formula sqrt(c3/c1) (``paper_k_star``)
minimises c1 K/N + c3/(N K), which lies below the exact error; it is reported under that name only. In
practice K is restricted (powers of two dividing N, or a user list): ``best_allowed_k`` is the argmin there.

Estimates: c2, c3 per prompt from its record; c1 per batch of prompts from the Gram matrix of their mean
gradients g_hat(x) (each averages M oracle group estimates, so E||g_hat||^2 = ||g||^2 + tr_oracle / M).
Intervals: one joint prompt bootstrap (``bootstrap``) for every constant, K* and best K.
"""

from __future__ import annotations

import math

import numpy as np

from grpo_mse.analysis import bootstrap as bs
from grpo_mse.gradients.estimators import GRPO, ORACLE


def exact_error(c1: float, c2: float, c3: float, k, budget: float):
    """c1 K/N + c2/N + c3/(N (K - 1)) (vectorised in K; K > 1)."""
    k = np.asarray(k, dtype=np.float64)
    return (c1 * k + c2 + c3 / (k - 1)) / budget


def paper_bound(c1: float, c2: float, c3: float, k, budget: float):
    """The paper's c1 K/N + c2/N + c3/(N K): below ``exact_error`` by c3/(N K (K - 1))."""
    k = np.asarray(k, dtype=np.float64)
    return (c1 * k + c2 + c3 / k) / budget


def paper_k_star(c1, c3):
    """The paper's K* = sqrt(c3/c1) (nan unless both are positive; vectorised)."""
    c1, c3 = np.asarray(c1, dtype=np.float64), np.asarray(c3, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((c1 > 0) & (c3 > 0), np.sqrt(np.abs(c3 / c1)), np.nan)


def k_star(c1, c3):
    """The exact minimiser 1 + sqrt(c3/c1) of c1 K + c3/(K - 1) over K > 1: inf when c1 <= 0 < c3 (error falls
    with K), 1 when c3 <= 0 < c1 (rises with K), nan when both are <= 0 (vectorised)."""
    c1, c3 = np.asarray(c1, dtype=np.float64), np.asarray(c3, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where((c1 > 0) & (c3 > 0), 1 + np.sqrt(np.abs(c3 / c1)), np.nan)
    value = np.where((c1 <= 0) & (c3 > 0), np.inf, value)
    return np.where((c3 <= 0) & (c1 > 0), 1.0, value)


def allowed_group_sizes(budget: int, allowed=None) -> list[int]:
    """``allowed`` (sorted, >= 2), or the powers of two 2, 4, ... that divide ``budget``."""
    if allowed:
        return sorted({int(k) for k in allowed if int(k) >= 2})
    return [2 ** j for j in range(1, int(math.log2(max(budget, 2))) + 1) if budget % 2 ** j == 0]


def best_allowed_k(c1, c3, allowed) -> np.ndarray:
    """argmin over K in ``allowed`` of c1 K + c3/(K - 1) (the exact error up to c2 and 1/N; vectorised)."""
    ks = np.asarray(allowed, dtype=np.float64)
    c1, c3 = np.atleast_1d(np.asarray(c1, dtype=np.float64)), np.atleast_1d(np.asarray(c3, dtype=np.float64))
    scores = c1[:, None] * ks[None, :] + c3[:, None] / (ks[None, :] - 1)
    best = ks[np.argmin(np.where(np.isnan(scores), np.inf, scores), axis=1)]
    return np.where(np.isnan(c1) | np.isnan(c3), np.nan, best)


def per_prompt_constants(record: dict) -> tuple[float, float]:
    """(c2_x, c3_x) = (K tr_oracle, K (K-1) (tr_grpo - tr_oracle)), tr_oracle less the oracle-noise bias
    ``record["oracle_noise"]`` when present (the oracle estimate V_hat adds Var(V_hat) tr Cov(s_bar), s_bar the
    group-mean score, to the oracle's trace)."""
    k, tr = record["K"], record["tr_cov"]
    oracle = tr[ORACLE] - record.get("oracle_noise", 0.0)
    return k * oracle, k * (k - 1) * (tr[GRPO] - oracle)


def batch_c1(weights: np.ndarray, batches: list[dict], position: dict) -> np.ndarray:
    """[R] c1 = mean_i W_i (||g_hat_i||^2 - tr_i / M) - mean over within-batch pairs i != j of W_i W_j <g_hat_i,
    g_hat_j>: each replicate's own prompts, grouped by the batch they were evaluated in (row 0: the data)."""
    diag_sum, diag_mass = np.zeros(len(weights)), np.zeros(len(weights))
    cross_sum, cross_mass = np.zeros(len(weights)), np.zeros(len(weights))
    for batch in batches:
        if "gram" not in batch or batch["n"] < 2:
            continue
        gram = np.asarray(batch["gram"], dtype=np.float64)
        w = weights[:, [position[i] for i in batch["prompt_indices"]]]
        diag_sum += w @ (np.diag(gram) - np.asarray(batch["within_each"]))
        diag_mass += w.sum(1)
        off = gram - np.diag(np.diag(gram))
        cross_sum += np.einsum("ri,ij,rj->r", w, off, w)
        cross_mass += w.sum(1) ** 2 - (w ** 2).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cross_mass > 0, diag_sum / diag_mass - cross_sum / cross_mass, np.nan)


def prompt_columns(records_by_k: dict[int, list[dict]]) -> tuple[list, dict]:
    """(sorted prompt indices, {prompt_index: column}) over every K (the bootstrap's units)."""
    prompts = sorted({r["prompt_index"] for records in records_by_k.values() for r in records})
    return prompts, {p: i for i, p in enumerate(prompts)}


def column(records: list[dict], position: dict, value_fn) -> np.ndarray:
    """[n_prompts] value_fn(record) at each prompt's column, nan where the prompt has no record."""
    values = np.full(len(position), np.nan)
    for r in records:
        values[position[r["prompt_index"]]] = value_fn(r)
    return values


def slope(ks, values_by_k: np.ndarray) -> np.ndarray:
    """[R] least-squares slope of per-K values [R, n_K] against K (0 under the 1/(K(K-1)) law for c3)."""
    x = np.asarray(ks, dtype=np.float64) - np.mean(ks)
    centred = values_by_k - values_by_k.mean(1, keepdims=True)
    return centred @ x / (x @ x)


def advise(records_by_k: dict[int, list[dict]], batches_by_k: dict[int, list[dict]], n_boot: int = 2000,
           seed: int = 0, budget: int = 1024, allowed=None, weights: np.ndarray | None = None) -> dict:
    """c1, c2, c3 per K and pooled (plain means over K), K* (paper and exact), best allowed K, all with joint
    prompt-bootstrap 95% intervals (``weights``: a ``bootstrap.prompt_weights`` matrix to share with others)."""
    ks = sorted(k for k in records_by_k if records_by_k[k])
    prompts, position = prompt_columns({k: records_by_k[k] for k in ks})
    if weights is None:
        weights = bs.prompt_weights(len(prompts), n_boot, seed)
    c2 = np.stack([bs.weighted_mean(weights, column(records_by_k[k], position, lambda r: per_prompt_constants(r)[0]))
                   for k in ks], axis=1)
    c3 = np.stack([bs.weighted_mean(weights, column(records_by_k[k], position, lambda r: per_prompt_constants(r)[1]))
                   for k in ks], axis=1)
    c1 = np.stack([batch_c1(weights, batches_by_k.get(k, []), position) for k in ks], axis=1)
    finite = np.isfinite(c1).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):  # c1: plain mean over the K that have c1 batches
        pooled = {"c1": np.where(finite > 0, np.where(np.isfinite(c1), c1, 0).sum(1) / finite, np.nan),
                  "c2": c2.mean(1), "c3": c3.mean(1)}
    allowed_k = allowed_group_sizes(budget, allowed)
    pooled["K_star_paper"] = paper_k_star(pooled["c1"], pooled["c3"])
    pooled["K_star_exact"] = k_star(pooled["c1"], pooled["c3"])
    pooled["K_best"] = best_allowed_k(pooled["c1"], pooled["c3"], allowed_k)
    n_boot = bs.n_boot_of(weights)
    best = pooled["K_best"][1:1 + n_boot]
    frequency = {str(k): float(np.mean(best == k)) for k in allowed_k if np.any(best == k)}
    summaries = {name: bs.summarise(values, weights) for name, values in pooled.items()}
    errors = np.stack([exact_error(pooled["c1"], pooled["c2"], pooled["c3"], k, budget) for k in allowed_k], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = errors / errors.min(1, keepdims=True)
    replicates = pooled["c1"][1:1 + n_boot], pooled["c3"][1:1 + n_boot]
    return {
        "per_K": {str(k): {"c1": bs.summarise(c1[:, i], weights), "c2": bs.summarise(c2[:, i], weights),
                           "c3": bs.summarise(c3[:, i], weights),
                           "n_prompts": len(records_by_k[k]), "n_c1_batches": len(batches_by_k.get(k, []))}
                  for i, k in enumerate(ks)},
        "pooled": {name: s["estimate"] for name, s in summaries.items()},
        "ci95": {name: s["ci95"] for name, s in summaries.items()},
        "c3_slope_per_K": bs.summarise(slope(ks, c3), weights) if len(ks) > 1 else None,
        "budget": budget, "allowed_K": allowed_k,
        "K_best_frequency": frequency,
        "relative_error_at_allowed_K": {str(k): bs.summarise(relative[:, i], weights) for i, k in enumerate(allowed_k)},
        "degenerate_replicates": {"n_boot": n_boot, "c1<=0": int(np.sum(replicates[0] <= 0)),
                                  "c3<=0": int(np.sum(replicates[1] <= 0)),
                                  "undefined": int(np.sum(np.isnan(replicates[0]) | np.isnan(replicates[1])))},
        "note": ("Exact error at budget N: c1 K/N + c2/N + c3/(N (K-1)), minimised at K_star_exact = 1 + sqrt(c3/c1); "
                 "K_star_paper = sqrt(c3/c1) is the paper's formula (it minimises c1 K/N + c3/(N K), a lower "
                 "bound); K_best = argmin over allowed_K. c2, c3 pooled as plain means of the per-K means; c1 from "
                 "within-batch pairs of prompts. 95% intervals: BCa, one joint prompt bootstrap (the same "
                 "resampled prompts for every constant); degenerate replicates (c1 or c3 <= 0) are counted "
                 "(K*: inf or 1)."),
    }


def rounded(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures ('-' for None / nan)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}"


def describe(advice: dict) -> str:
    """Advisor printout: constants, paper and exact K*, best allowed K, each with its 95% interval, rounded."""
    pooled, ci = advice["pooled"], advice["ci95"]

    def item(name):
        low, high = ci.get(name) or (None, None)
        return f"{rounded(pooled[name])} [{rounded(low)}, {rounded(high)}]"

    slope_line = ""
    if advice.get("c3_slope_per_K"):
        s = advice["c3_slope_per_K"]
        slope_line = ("\n  c3 per K: " + ", ".join(f"K={k}: {rounded(v['c3']['estimate'])}"
                                                     for k, v in advice["per_K"].items())
                      + f"; slope in K {rounded(s['estimate'])} [{', '.join(rounded(v) for v in s['ci95'] or [])}]"
                      " (0 under the 1/(K(K-1)) law)")
    bad = advice["degenerate_replicates"]
    k_star = pooled.get("K_star_exact")
    small = " (below 2: use the smallest allowed K)" if k_star is not None and k_star < 2 else ""
    return (f"group-size advisor (95% joint prompt bootstrap, {bad['n_boot']} replicates; "
            f"{bad['c1<=0']} with c1<=0, {bad['c3<=0']} with c3<=0):\n"
            f"  c1={item('c1')} c2={item('c2')} c3={item('c3')}\n"
            f"  exact K* = 1+sqrt(c3/c1) = {item('K_star_exact')}{small}; "
            f"paper's sqrt(c3/c1) = {item('K_star_paper')}; "
            f"best K in {advice['allowed_K']} = {item('K_best')}" + slope_line)
