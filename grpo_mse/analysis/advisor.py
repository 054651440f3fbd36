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

import json
import math
import os
import warnings

import numpy as np

from grpo_mse.analysis import bootstrap as bs
from grpo_mse.errors import InputError
from grpo_mse.gradients.estimators import GRPO, ORACLE
from grpo_mse.tables.records import C1BatchRecord, PromptRecord
from grpo_mse.tables.validate import whole


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
    """``allowed`` (sorted), or the powers of two 2, 4, ... that divide ``budget``. InputError (one line) unless
    ``budget`` is a whole number >= 2 and every allowed K is a whole number >= 2 that divides it (B = N/K prompts)."""
    if whole(budget) is None or budget < 2:
        raise InputError(f"the advisor's budget must be a whole number of sequences >= 2 (got {budget!r})")
    if allowed is None or (hasattr(allowed, "__len__") and len(allowed) == 0):
        return [2**j for j in range(1, int(math.log2(budget)) + 1) if budget % 2**j == 0]
    ks = [whole(k) for k in allowed]
    bad = [k for k, w in zip(allowed, ks) if w is None or w < 2 or budget % w]
    if bad:
        raise InputError(
            f"allowed K {bad} do not fit the budget {budget}: each K must be a whole number >= 2 that divides it"
        )
    return sorted(set(ks))


def clipped(c) -> np.ndarray:
    """max(c, 0): c1 (a variance) and c3 (2 E tr Var zeta_2) are >= 0, so a negative estimate means "about 0"."""
    return np.maximum(np.asarray(c, dtype=np.float64), 0.0)


TIE = 1e-12  # relative gap below which two allowed K are a tie


def best_allowed_k(c1, c3, allowed) -> np.ndarray:
    """argmin over K in ``allowed`` of c1 K + c3/(K - 1) with c1, c3 clipped at 0 (the exact error up to c2 and
    1/N; vectorised); nan where c1 or c3 is nan or where the smallest value is shared by several K (a tie, e.g.
    c1 = c3 = 0 when every V is 0 or 1: no argmin of equal values)."""
    ks = np.asarray(allowed, dtype=np.float64)
    c1, c3 = clipped(np.atleast_1d(c1)), clipped(np.atleast_1d(c3))
    with np.errstate(invalid="ignore"):
        scores = c1[:, None] * ks[None, :] + c3[:, None] / (ks[None, :] - 1)
    scores = np.where(np.isnan(scores), np.inf, scores)
    low = scores.min(1, keepdims=True)
    ties = (scores <= low + TIE * np.abs(low)).sum(1)
    best = ks[np.argmin(scores, axis=1)]
    return np.where(np.isnan(c1) | np.isnan(c3) | (ties > 1), np.nan, best)


def relative_errors(c1, c2, c3, allowed, budget: float) -> np.ndarray:
    """[R, n_allowed] exact error at each allowed K (c1, c3 clipped at 0) over its smallest value; nan where
    that smallest value is not positive (no relative error against 0 or a negative number)."""
    errors = np.stack(
        [exact_error(clipped(c1), np.asarray(c2, dtype=np.float64), clipped(c3), k, budget) for k in allowed], axis=-1
    )
    low = errors.min(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(low > 0, errors / np.where(low > 0, low, 1.0), np.nan)


def _span(ks: list[int], allowed: list[int]) -> str:
    """ "any K >= 4", "any K <= 8", "K in [4, 8, 16]" or "every allowed K" for the set ``ks`` of allowed K."""
    if ks == allowed:
        return "every allowed K"
    if len(ks) == 1:
        return f"only K = {ks[0]}"
    start, stop = allowed.index(ks[0]), allowed.index(ks[-1])
    if allowed[start : stop + 1] == ks and stop == len(allowed) - 1:
        return f"any K >= {ks[0]}"
    if allowed[start : stop + 1] == ks and start == 0:
        return f"any K <= {ks[-1]}"
    return f"K in {ks}"


def recommendation(
    c1: float, c2: float, c3: float, ci_c1, ci_c3, allowed: list[int], budget: float, tolerance: float = 0.10
) -> dict:
    """What the data support about K, never more.

    ``identified`` only when c1 > 0 and c3 > 0 and neither 95% interval reaches 0 (then K_best is the unique
    argmin, or ``ties`` lists the allowed K sharing the minimum). Otherwise ``lean`` says which way the point
    estimates point (larger K when c1 is about 0, smaller when c3 is), K_best is None, and ``near_best_K`` lists
    the allowed K whose exact error (c1, c3 clipped at 0) is within ``tolerance`` of the smallest, e.g. "any K
    >= 4 within 10%"; the relative errors need a positive smallest error (c2 or the clipped c1, c3 > 0)."""
    values = [c1, c2, c3]
    if any(v is None or not np.isfinite(v) for v in values):
        return {
            "identified": False,
            "K_best": None,
            "ties": [],
            "near_best_K": [],
            "lean": "undefined",
            "message": "best K not identified: c1, c2 or c3 is undefined or infinite",
        }
    relative = relative_errors(c1, c2, c3, allowed, budget)
    near = [k for k, r in zip(allowed, relative) if np.isfinite(r) and r <= 1 + tolerance]
    scores = clipped(c1) * np.asarray(allowed, dtype=np.float64) + clipped(c3) / (np.asarray(allowed) - 1.0)
    tied = [k for k, v in zip(allowed, scores) if v <= scores.min() + TIE * abs(scores.min())]
    reaches_zero = {  # unless the lower end is a number > 0 (not null, nan or a string)
        name: not (c > 0 and interval_of(ci) is not None and interval_of(ci)[0] > 0)
        for name, c, ci in (("c1", c1, ci_c1), ("c3", c3, ci_c3))
    }
    if c1 <= 0 and c3 <= 0:
        lean = "none (c1 and c3 both <= 0: K does not change the error detectably)"
    elif c1 <= 0:
        lean = "larger K (c1 <= 0: the error falls with K)"
    elif c3 <= 0:
        lean = "smaller K (c3 <= 0: the error rises with K)"
    elif reaches_zero["c1"] and reaches_zero["c3"]:
        lean = f"K near {1 + math.sqrt(c3 / c1):.3g}, but both c1 and c3 may be 0"
    elif reaches_zero["c1"]:
        lean = f"K near {1 + math.sqrt(c3 / c1):.3g}, but c1 may be 0 (then larger K is better)"
    elif reaches_zero["c3"]:
        lean = f"K near {1 + math.sqrt(c3 / c1):.3g}, but c3 may be 0 (then smaller K is better)"
    else:
        lean = f"K near {1 + math.sqrt(c3 / c1):.3g}"
    identified = not (reaches_zero["c1"] or reaches_zero["c3"])
    best = tied[0] if identified and len(tied) == 1 else None
    within = (
        f"{_span(near, allowed)} within {tolerance:.0%} of the smallest error"
        if near
        else "no relative error (the smallest error is not positive)"
    )
    if best is not None:
        message = f"best K = {best}; {within}"
    elif identified:
        message = f"tie: K in {tied} give the same error; {within}"
    else:
        message = f"best K not identified (an interval of c1 or c3 reaches 0); data lean to {lean}; {within}"
    return {
        "identified": identified,
        "K_best": best,
        "ties": tied if len(tied) > 1 else [],
        "near_best_K": near,
        "tolerance": tolerance,
        "lean": lean,
        "message": message,
    }


def json_value(value):
    """+inf -> "inf", -inf -> "-inf" (a bound that is infinite), nan -> None ("undefined"), recursively."""
    if isinstance(value, dict):
        return {key: json_value(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return float(value)
    return value


def number(value) -> float:
    """A saved advisor number back as a float: "inf"/"-inf" -> +-inf; None, other text, bools and other types
    -> nan (undefined)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, np.integer, np.floating)):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


def interval_of(ci) -> list[float] | None:
    """A saved 95% interval as two floats ("inf" -> inf); None when absent or malformed (not two numbers, an end
    undefined, low > high, or an infinite end on the wrong side)."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    low, high = (number(v) for v in ci)
    return [low, high] if low <= high and low < math.inf and high > -math.inf else None


def status(constants: dict, ci: dict, allowed, budget) -> dict:
    """What a consumer of saved advice may state, recomputed from the pooled constants and their intervals
    (``recommendation``; saved "inf", null, strings and missing values become undefined): {"identified",
    "K_star_exact" (1 + sqrt(c3/c1), None unless identified), "K_best" (None unless identified and unique),
    "message"}. Never a K from constants that are undefined, infinite or <= 0."""
    values = []
    for name in ("c1", "c2", "c3"):
        try:
            values.append(number(constants.get(name)))
        except (TypeError, ValueError):
            values.append(math.nan)
    try:
        ks = allowed_group_sizes(int(number(budget)), allowed)
    except (InputError, TypeError, ValueError, OverflowError):
        ks = []
    if not ks:
        return {
            "identified": False,
            "K_star_exact": None,
            "K_best": None,
            "message": "best K not identified: the advice names no allowed K that fits its budget",
        }
    advice = recommendation(*values, interval_of(ci.get("c1")), interval_of(ci.get("c3")), ks, number(budget))
    c1, _, c3 = values
    star = 1 + math.sqrt(c3 / c1) if advice["identified"] else None
    return {
        "identified": advice["identified"],
        "K_star_exact": star,
        "K_best": advice["K_best"],
        "message": advice["message"],
    }


def advice_status(advice: dict) -> dict:
    """``status`` of a saved ``group_size_advisor`` entry."""
    return status(advice.get("pooled") or {}, advice.get("ci95") or {}, advice.get("allowed_K"), advice.get("budget"))


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


def k_star_summary(
    c1: np.ndarray,
    c3: np.ndarray,
    d1: np.ndarray,
    d3: np.ndarray,
    weights: np.ndarray,
    level: float = 0.95,
    widen=(0.0, 0.0),
) -> dict:
    """K*_exact = 1 + sqrt(c3/c1) = 1 + 1/sqrt(q) with a studentized interval for q = c1/c3 (log scale when every
    replicate's q is positive, then the same as studentizing log(K* - 1); natural scale otherwise, so that c1 <= 0
    is inside the interval and K*'s ends at inf). se(q) by the delta method from the weight derivatives ``d1``,
    ``d3`` of c1 and c3: dq = (d1 - q d3) / c3 (their covariance included). Replicates with c3 <= 0 are left out
    (counted in degenerate_replicates). ``widen`` = (d_lo, d_hi) moves K*'s lower and upper end out by that many
    standard errors of q on its scale (q's upper and lower end); ``pieces`` are q's. BCa when the data's own c1 or
    c3 is not positive."""
    k = k_star(c1, c3)
    if not (c1[0] > 0 and c3[0] > 0):
        return {**bs.summarise(k, weights), "interval": "bca"}
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(c3 > 0, c1 / c3, np.nan)
        se = np.sqrt(bs.influence_covariance(weights, (d1 - q[:, None] * d3) / c3[:, None]))
    summary = bs.studentized_summary(q, se, weights, log=True, level=level, widen=(widen[1], widen[0]))
    if summary["interval"] == "bca":
        return {**bs.summarise(k, weights), "interval": "bca"}
    low, high = summary["ci95"]
    with np.errstate(divide="ignore"):
        bounds = [1 + 1 / np.sqrt(high) if high > 0 else np.inf, 1 + 1 / np.sqrt(low) if low > 0 else np.inf]
    n_boot = bs.n_boot_of(weights)
    return {
        "estimate": float(k[0]),
        "ci95": [float(v) for v in bounds],
        "n_undefined": int(np.isnan(k[1 : 1 + n_boot]).sum()),
        "interval": "studentized-log" if summary["interval"] == "studentized-log" else "studentized",
        "pieces": summary["pieces"],
    }


CALIBRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coverage_calibration.json")
CALIBRATED = ("c1", "c2", "c3", "K_star_exact")  # the intervals whose coverage the calibration table gives
T_TOLERANCE = 1.25  # a calibration cell applies to runs with T within this factor of its own


def interval_widening(path: str = CALIBRATION) -> dict[str, tuple[float, float]]:
    """The calibrated widening (d_lo, d_hi) of each studentized interval: its lower and upper end move out by that
    many standard errors, t_hi + d_lo and t_lo - d_hi in place of the bootstrap-t quantiles (``widening`` in the
    calibration table, scripts/coverage_heavy_tails.py --merge); (0, 0) for a statistic it does not list or
    without a table."""
    found = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle).get("widening") or {}
    return {name: tuple(float(v) for v in found.get(name, (0.0, 0.0))) for name in CALIBRATED}


def cells_at(n_prompts: int, cells: list[dict]) -> tuple[list[dict], str]:
    """The calibration cells whose T applies to a run of ``n_prompts`` prompts, and how: those with T within a
    factor T_TOLERANCE of it ("near"); else, when it lies between two simulated T, the cells of both ("between":
    the printout gives the range over both); else none (outside the simulated T)."""
    grid = sorted({c["T"] for c in cells})
    near = [c for c in cells if abs(math.log(n_prompts / c["T"])) <= math.log(T_TOLERANCE)]
    if near:
        return near, "near"
    below, above = [t for t in grid if t < n_prompts], [t for t in grid if t > n_prompts]
    if below and above:
        return [c for c in cells if c["T"] in (below[-1], above[0])], "between"
    return [], "outside"


def simulated_coverage(index: float, n_prompts: int, path: str = CALIBRATION, share: float | None = None) -> dict:
    """The simulated coverage of the c1, c2, c3 and K* intervals (as widened by ``interval_widening``) at this run's T
    and tail, from the calibration cells (scripts/coverage_heavy_tails.py --merge, committed as ``path``; one per
    simulated tail shape and T) that apply: T within a factor T_TOLERANCE of the cell's, or, between two simulated
    T, the cells of both (``cells_at``); and the Hill tail index of the per-prompt c2 (``tail_index``) within the
    5-95% range of the cell's runs. Per statistic the lowest and highest coverage over those cells (the data cannot
    say which tail shape produced them) and the largest Monte Carlo standard error. ``status`` "unknown" (with a
    ``reason``) when no cell applies or the index is undefined: never the nearest cell. ``share`` (the largest
    prompt's share of c2) is recorded for the printout."""
    found = {
        "tail_index": None if index is None or not np.isfinite(index) else float(index),
        "largest_prompt_share": None if share is None or not np.isfinite(share) else float(share),
        "T": n_prompts,
    }
    if found["tail_index"] is None:
        return {**found, "status": "unknown", "reason": "the tail index of the per-prompt c2 is undefined"}
    if not os.path.exists(path):
        return {**found, "status": "unknown", "reason": f"no calibration table at {path}"}
    with open(path, encoding="utf-8") as handle:
        cells = [c for c in json.load(handle).get("cells") or [] if "index_range" in c]
    near, how = cells_at(n_prompts, cells)
    if not near:
        return {**found, "status": "unknown", "reason": f"no calibration cell at T = {n_prompts}"}
    inside = [c for c in near if c["index_range"][0] <= index <= c["index_range"][1]]
    if not inside:
        return {
            **found,
            "status": "unknown",
            "reason": f"no simulated tail at T = {n_prompts} has tail index {index:.3g}",
        }
    coverage = {
        name: {
            "low": min(c["coverage"][name]["coverage"] for c in inside),
            "high": max(c["coverage"][name]["coverage"] for c in inside),
            "mc_se": max(c["coverage"][name]["mc_se"] for c in inside),
        }
        for name in CALIBRATED
        if all(name in c["coverage"] for c in inside)
    }
    return {
        **found,
        "status": "calibrated",
        "T_match": how,
        "cells": [{key: c[key] for key in ("T", "tail", "runs")} for c in inside],
        "coverage": coverage,
        "source": "grpo_mse/analysis/coverage_calibration.json (scripts/coverage_heavy_tails.py)",
    }


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


def prompt_columns(records_by_k: dict[int, list[PromptRecord]]) -> tuple[list, dict]:
    """(sorted prompt indices, {prompt_index: column}) over every K (the bootstrap's units)."""
    prompts = sorted({r.prompt_index for records in records_by_k.values() for r in records})
    return prompts, {p: i for i, p in enumerate(prompts)}


def column(records: list[PromptRecord], position: dict, value_fn) -> np.ndarray:
    """[n_prompts] value_fn(record) at each prompt's column, nan where the prompt has no record."""
    values = np.full(len(position), np.nan)
    for r in records:
        values[position[r.prompt_index]] = value_fn(r)
    return values


def slope(ks, values_by_k: np.ndarray) -> np.ndarray:
    """[R] least-squares slope of per-K values [R, n_K] against K (0 under the 1/(K(K-1)) law for c3)."""
    x = np.asarray(ks, dtype=np.float64) - np.mean(ks)
    centred = values_by_k - values_by_k.mean(1, keepdims=True)
    return centred @ x / (x @ x)


def advise(
    records_by_k: dict[int, list[PromptRecord]],
    batches_by_k: dict[int, list[C1BatchRecord]],
    n_boot: int = 2000,
    seed: int = 0,
    budget: int = 1024,
    allowed=None,
    weights: np.ndarray | None = None,
    level: float = 0.95,
    widen: dict | None = None,
) -> dict:
    """c1, c2, c3 per K and pooled (plain means over K), K* (paper and exact), best allowed K, all with joint
    prompt-bootstrap 95% intervals (``weights``: a ``bootstrap.prompt_weights`` matrix to share with others;
    ``level``: another level for the studentized intervals of the pooled constants and K*, for coverage studies,
    recorded as ``interval_level``; the keys keep their names). The studentized intervals of c1, c2, c3 and K* have
    each end moved out by ``widen`` standard errors ({name: (d_lo, d_hi)}; None: the calibrated
    ``interval_widening``, {}: none), recorded as ``interval_widening``; their unwidened ``studentized`` pieces are
    kept."""
    ks = sorted(k for k in records_by_k if records_by_k[k])
    prompts, position = prompt_columns({k: records_by_k[k] for k in ks})
    if weights is None:
        weights = bs.prompt_weights(len(prompts), n_boot, seed)
    columns = {
        name: [column(records_by_k[k], position, lambda r, j=j: per_prompt_constants(r)[j]) for k in ks]
        for j, name in ((0, "c2"), (1, "c3"))
    }
    c2, c3 = (np.stack([bs.weighted_mean(weights, c) for c in columns[name]], axis=1) for name in ("c2", "c3"))
    c1_parts = [batch_c1(weights, batches_by_k.get(k, []), position, gradient=True) for k in ks]
    c1 = np.stack([value for value, _ in c1_parts], axis=1)
    finite = np.isfinite(c1).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):  # c1: plain mean over the K that have c1 batches
        pooled = {
            "c1": np.where(finite > 0, np.where(np.isfinite(c1), c1, 0).sum(1) / finite, np.nan),
            "c2": c2.mean(1),
            "c3": c3.mean(1),
        }
        derivative = {"c1": sum(np.nan_to_num(d) for _, d in c1_parts) / finite[:, None]}  # [R, n] in the weights
        for name, values in (("c2", c2), ("c3", c3)):
            derivative[name] = sum(
                bs.mean_gradient(weights, c, values[:, i]) for i, c in enumerate(columns[name])
            ) / len(ks)
    allowed_k = allowed_group_sizes(budget, allowed)
    pooled["K_star_paper"] = paper_k_star(pooled["c1"], pooled["c3"])
    pooled["K_star_exact"] = k_star(pooled["c1"], pooled["c3"])
    pooled["K_best"] = best_allowed_k(pooled["c1"], pooled["c3"], allowed_k)
    n_boot = bs.n_boot_of(weights)
    best = pooled["K_best"][1 : 1 + n_boot]
    frequency = {str(k): float(np.mean(best == k)) for k in allowed_k if np.any(best == k)}
    if np.any(np.isnan(best)):
        frequency["undefined"] = float(np.mean(np.isnan(best)))  # ties (e.g. c1 = c3 = 0) or undefined constants
    summaries = {name: bs.summarise(values, weights) for name, values in pooled.items()}
    errors = {name: np.sqrt(bs.influence_covariance(weights, derivative[name])) for name in derivative}
    stretch = (
        interval_widening() if widen is None else {name: tuple(widen.get(name, (0.0, 0.0))) for name in CALIBRATED}
    )
    summaries["c1"] = bs.studentized_summary(pooled["c1"], errors["c1"], weights, level=level, widen=stretch["c1"])
    for name in ("c2", "c3"):
        summaries[name] = bs.studentized_summary(
            pooled[name], errors[name], weights, log=True, level=level, widen=stretch[name]
        )
    for name in ("c1", "c2", "c3"):  # >= 0 (a variance, a mean variance, 2 E tr Var zeta_2): clipped, flagged
        summaries[name] = bs.at_least_zero(summaries[name])
    summaries["K_star_exact"] = k_star_summary(
        pooled["c1"],
        pooled["c3"],
        derivative["c1"],
        derivative["c3"],
        weights,
        level=level,
        widen=stretch["K_star_exact"],
    )
    paper = summaries["K_star_exact"]
    if paper["interval"] != "bca":  # sqrt(c3/c1) = K*_exact - 1: the same interval, shifted
        summaries["K_star_paper"] = {
            **summaries["K_star_paper"],
            "interval": paper["interval"],
            "ci95": [v - 1 for v in paper["ci95"]],
        }
    relative = relative_errors(pooled["c1"], pooled["c2"], pooled["c3"], allowed_k, budget)
    replicates = pooled["c1"][1 : 1 + n_boot], pooled["c3"][1 : 1 + n_boot]
    point = {name: summaries[name]["estimate"] for name in ("c1", "c2", "c3")}
    advice = recommendation(
        *(math.nan if point[n] is None else point[n] for n in ("c1", "c2", "c3")),
        summaries["c1"]["ci95"],
        summaries["c3"]["ci95"],
        allowed_k,
        budget,
    )
    return json_value(
        {
            "per_K": {
                str(k): {
                    "c1": bs.at_least_zero(bs.summarise(c1[:, i], weights)),
                    "c2": bs.at_least_zero(bs.summarise(c2[:, i], weights)),
                    "c3": bs.at_least_zero(bs.summarise(c3[:, i], weights)),
                    "n_prompts": len(records_by_k[k]),
                    "n_c1_batches": len(batches_by_k.get(k, [])),
                }
                for i, k in enumerate(ks)
            },
            "pooled": {name: s["estimate"] for name, s in summaries.items()},
            "ci95": {name: s["ci95"] for name, s in summaries.items()},
            "ci95_method": {name: s.get("interval", "bca") for name, s in summaries.items()},
            "ci95_below_zero": {
                name: "unreliable" if s.get("unreliable") else "clipped"
                for name, s in summaries.items()
                if s.get("clipped") or s.get("unreliable")
            },
            **({} if level == 0.95 else {"interval_level": level}),
            "interval_widening": {name: list(w) for name, w in stretch.items()},
            "studentized": {name: summaries[name].get("pieces") for name in CALIBRATED},
            "simulated_coverage": simulated_coverage(
                tail_index(columns["c2"]), len(prompts), share=tail_share(columns["c2"])
            ),
            "c3_slope_per_K": bs.summarise(slope(ks, c3), weights) if len(ks) > 1 else None,
            "budget": budget,
            "allowed_K": allowed_k,
            "K_best_frequency": frequency,
            "relative_error_at_allowed_K": {
                str(k): bs.summarise(relative[:, i], weights) for i, k in enumerate(allowed_k)
            },
            "recommendation": advice,
            "degenerate_replicates": {
                "n_boot": n_boot,
                "c1<=0": int(np.sum(replicates[0] <= 0)),
                "c3<=0": int(np.sum(replicates[1] <= 0)),
                "undefined": int(np.sum(np.isnan(replicates[0]) | np.isnan(replicates[1]))),
            },
            "note": (
                "Exact error at budget N: c1 K/N + c2/N + c3/(N (K-1)), minimised at K_star_exact = 1 + sqrt(c3/c1); "
                "K_star_paper = sqrt(c3/c1) is the paper's formula (it minimises c1 K/N + c3/(N K), a lower "
                "bound); K_best = argmin over allowed_K. c2, c3 pooled as plain means of the per-K means; c1 from "
                "within-batch pairs of prompts. 95% intervals from one joint prompt bootstrap (the same "
                "resampled prompts for every constant): studentized for the pooled c1 (natural scale), c2, c3 "
                "(log scale) and both K* (c1/c3), BCa for the rest (ci95_method). The studentized ends are moved out "
                "by interval_widening standard errors (fitted so that each end misses <= 2.5% in every simulated "
                "heavy-tail cell; the plain pieces in studentized); simulated_coverage gives the coverage simulated "
                "at this run's T and tail index of c2 (the calibration cells that apply, with Monte Carlo error; "
                "status unknown when none applies). "
                "Degenerate replicates (c1 or c3 <= 0) are counted "
                '(K*: inf or 1). Numbers: "inf" = +infinity (e.g. K* when c1 <= 0 < c3), null = undefined. '
                "c1, c2, c3 are >= 0 but their unbiased estimates are not: an interval reaching below 0 is clipped "
                "at 0 and one whose estimate or whole interval lies below 0 is unreliable (too few prompts), both "
                "listed in ci95_below_zero. "
                "K_best, relative errors and recommendation use c1, c3 clipped at 0; K_best is undefined for ties; "
                "recommendation.K_best is null unless c1 > 0, c3 > 0 and neither interval reaches 0."
            ),
        }
    )


def rounded(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures ('-' for None / nan, 'inf' for +infinity or "inf")."""
    value = number(value)
    if math.isnan(value):
        return "-"
    return f"{value:.{digits}g}"


def coverage_text(calibration: dict | None, name: str) -> str:
    """ " (simulated coverage 96% +-1.1%)" or, over several tail shapes that fit this run, " (simulated coverage
    95-99% +-1.2%)"; " (coverage unknown)" when no cell applies; "" for c2 (not calibrated) and advice saved
    without a calibration."""
    name = "K_star_exact" if name == "K_star_paper" else name  # sqrt(c3/c1) = K*_exact - 1: the same interval
    if not calibration or name not in CALIBRATED:
        return ""
    if calibration.get("status") != "calibrated" or name not in calibration.get("coverage", {}):
        return " (coverage unknown)"
    c = calibration["coverage"][name]
    low, high = round(100 * c["low"]), round(100 * c["high"])
    span = f"{low}%" if low == high else f"{low}-{high}%"
    return f" (simulated coverage {span} +-{c['mc_se']:.1%})"


def calibration_line(calibration: dict | None) -> str:
    """Which calibration cells the coverage comes from, or why it is unknown."""
    if not calibration:
        return ""
    text = (
        f"\n  T = {calibration.get('T')}, tail index of c2 {rounded(calibration.get('tail_index'))} (largest "
        f"prompt's share {rounded(calibration.get('largest_prompt_share'))}): "
    )
    if calibration.get("status") != "calibrated":
        return text + f"coverage unknown ({calibration.get('reason', 'no calibration cell applies')})"
    grid = sorted({c["T"] for c in calibration["cells"]})
    where = f"T={grid[0]}" if len(grid) == 1 else f"T={grid[0]} and {grid[1]} (this T lies between)"
    cells = ", ".join(dict.fromkeys(c["tail"] for c in calibration["cells"]))
    return text + (
        f"coverage simulated at {where} for the tail shapes that fit ({cells}; "
        "scripts/coverage_heavy_tails.py; +-: Monte Carlo s.e.)"
    )


def widening_text(advice: dict) -> str:
    """ "; c1, c2, c3, K* widened for heavy tails" when some interval's ends were moved out, else ""."""
    stretched = {name: w for name, w in (advice.get("interval_widening") or {}).items() if list(w) != [0.0, 0.0]}
    if not stretched:
        return ""
    names = ", ".join("K*" if name == "K_star_exact" else name for name in stretched)
    return f"; {names} widened for heavy tails"


def describe(advice: dict) -> str:
    """Advisor printout: constants, paper and exact K*, best allowed K (only where identified), each with its 95%
    interval, rounded, and its simulated coverage at this run's T and tail (or "unknown"); where K is not
    identified, "not identified" with the way the data lean and the K within 10% of the smallest error."""
    pooled, ci = advice["pooled"], advice["ci95"]
    calibration = advice.get("simulated_coverage")

    def item(name):
        low, high = interval_of(ci.get(name)) or (None, None)
        flag = ""
        if name in ("c1", "c2", "c3"):  # >= 0: clipped and flagged, also in advice saved before the clipping
            saved = (advice.get("ci95_below_zero") or {}).get(name)
            summary = bs.at_least_zero(
                {"estimate": number(pooled.get(name)), "ci95": None if low is None else [low, high]}
            )
            low, high = summary["ci95"] or (low, high)
            flag = bs.below_zero_flag({**summary, **({saved: True} if saved else {})})
        return f"{rounded(pooled.get(name))} [{rounded(low)}, {rounded(high)}]{flag}" + coverage_text(calibration, name)

    slope_line = ""
    if advice.get("c3_slope_per_K"):
        s = advice["c3_slope_per_K"]
        slope_line = (
            "\n  c3 per K: "
            + ", ".join(f"K={k}: {rounded(v['c3']['estimate'])}" for k, v in advice["per_K"].items())
            + f"; slope in K {rounded(s['estimate'])} [{', '.join(rounded(v) for v in s['ci95'] or [])}]"
            " (0 under the 1/(K(K-1)) law)"
        )
    bad = advice["degenerate_replicates"]
    now = advice_status(advice)
    if now["identified"]:
        small = " (below 2: use the smallest allowed K)" if now["K_star_exact"] < 2 else ""
        stars = (
            f"exact K* = 1+sqrt(c3/c1) = {item('K_star_exact')}{small}; paper's sqrt(c3/c1) = {item('K_star_paper')}"
        )
    else:
        positive = all(number(pooled.get(n)) > 0 and math.isfinite(number(pooled.get(n))) for n in ("c1", "c3"))
        estimate = f" (point estimate {item('K_star_exact')})" if positive else ""
        stars = f"exact K* = 1+sqrt(c3/c1): not identified{estimate}"
    if now["K_best"] is not None:
        best = f"best K in {advice['allowed_K']} = {now['K_best']} ({now['message'].split('; ', 1)[-1]})"
    else:
        best = f"K in {advice['allowed_K']}: {now['message']}"
    measured = ""
    if advice.get("measured_curve"):
        from grpo_mse.analysis.measured_curve import describe as describe_curve

        measured = "\n" + describe_curve(advice["measured_curve"])
    return (
        f"group-size advisor (95% joint prompt bootstrap{widening_text(advice)}, {bad['n_boot']} replicates; "
        f"{bad['c1<=0']} with c1<=0, {bad['c3<=0']} with c3<=0):\n"
        f"  c1={item('c1')} c2={item('c2')} c3={item('c3')}\n"
        f"  {stars};\n  {best}" + slope_line + calibration_line(calibration) + measured
    )
