"""The group-size advisor's budgeted error model (Theorem 7). At a budget of N = B K sequences per step (B
prompts, one group of K each) the GRPO gradient's error is exactly

    E||g_hat - grad J||^2 = (K/N) (c1 + E_X MSE_GRPO(X, K)) = c1 K/N + c2/N + c3/(N (K - 1)),

- c1 = E_X ||g(X) - E g||^2,  c2 = E_X sigma_O^2(X) = E_X K tr Cov_oracle,
- c3 = 2 E_X tr Var zeta_2(X) = E_X K (K - 1) (tr Cov_GRPO - tr Cov_oracle),

minimised over real K at K* = 1 + sqrt(c3/c1) (``k_star``). The paper's formula sqrt(c3/c1) (``paper_k_star``)
minimises c1 K/N + c3/(N K), which lies below the exact error; it is reported under that name only. In
practice K is restricted (powers of two dividing N, or a user list): ``best_allowed_k`` is the argmin there.
Also here: the recommendation text, whether saved advice identifies a K (``status``), the JSON codec of
saved numbers ("inf", null), and the constants' estimators from a run's records (the bootstrap's units): c2, c3
per prompt from its record, c1 per batch of prompts from the Gram matrix of their mean gradients g_hat(x) (each
averages M oracle group estimates, so E||g_hat||^2 = ||g||^2 + tr_oracle / M), the slope of c3 in K, and the tail
of the per-prompt c2 (Hill index, largest prompt's share).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from grpo_mse.analysis.bootstrap import number
from grpo_mse.errors import InputError
from grpo_mse.gradients.estimators import GRPO, ORACLE
from grpo_mse.tables.inputs import whole
from grpo_mse.tables.records import C1BatchRecord, PromptRecord, SavedRecord


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


@dataclass(frozen=True, kw_only=True)
class Recommendation(SavedRecord):
    """What the data support about K (``recommendation``; saved as the advice's ``recommendation``)."""

    identified: bool  # c1 > 0 and c3 > 0 and neither 95% interval reaches 0
    K_best: int | None  # the unique best allowed K; None unless identified and unique
    ties: list[int]  # the allowed K sharing the smallest error when several do, else []
    near_best_K: list[int]  # the allowed K within ``tolerance`` of the smallest exact error
    tolerance: float | None = None  # relative tolerance of near_best_K (absent when a constant is undefined)
    lean: str  # which way the point estimates point, in words
    message: str  # the one-line verdict printed and saved


def recommendation(
    c1: float, c2: float, c3: float, ci_c1, ci_c3, allowed: list[int], budget: float, tolerance: float = 0.10
) -> Recommendation:
    """What the data support about K, never more.

    ``identified`` only when c1 > 0 and c3 > 0 and neither 95% interval reaches 0 (then K_best is the unique
    argmin, or ``ties`` lists the allowed K sharing the minimum). Otherwise ``lean`` says which way the point
    estimates point (larger K when c1 is about 0, smaller when c3 is), K_best is None, and ``near_best_K`` lists
    the allowed K whose exact error (c1, c3 clipped at 0) is within ``tolerance`` of the smallest, e.g. "any K
    >= 4 within 10%"; the relative errors need a positive smallest error (c2 or the clipped c1, c3 > 0)."""
    values = [c1, c2, c3]
    if any(v is None or not np.isfinite(v) for v in values):
        return Recommendation(
            identified=False,
            K_best=None,
            ties=[],
            near_best_K=[],
            lean="undefined",
            message="best K not identified: c1, c2 or c3 is undefined or infinite",
        )
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
    return Recommendation(
        identified=identified,
        K_best=best,
        ties=tied if len(tied) > 1 else [],
        near_best_K=near,
        tolerance=tolerance,
        lean=lean,
        message=message,
    )


def json_value(value):
    """+inf -> "inf", -inf -> "-inf" (a bound that is infinite), nan -> None ("undefined"), recursively; a saved
    record (``SavedRecord``) as its JSON object."""
    if isinstance(value, SavedRecord):
        return json_value(value.to_json())
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


def interval_of(ci) -> list[float] | None:
    """A saved 95% interval as two floats ("inf" -> inf); None when absent or malformed (not two numbers, an end
    undefined, low > high, or an infinite end on the wrong side)."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    low, high = (number(v) for v in ci)
    return [low, high] if low <= high and low < math.inf and high > -math.inf else None


@dataclass(frozen=True)
class AdviceStatus:
    """What a consumer of saved advice may state (``status``); never a K from unidentified constants."""

    identified: bool  # c1 > 0, c3 > 0 and neither interval reaches 0
    K_star_exact: float | None  # 1 + sqrt(c3/c1); None unless identified
    K_best: int | None  # the best allowed K; None unless identified and unique
    message: str  # why, in one line (the recommendation's message)


def status(constants: dict, ci: dict, allowed, budget) -> AdviceStatus:
    """What a consumer of saved advice may state, recomputed from the pooled constants and their intervals
    (``recommendation``; saved "inf", null, strings and missing values become undefined). Never a K from
    constants that are undefined, infinite or <= 0."""
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
        return AdviceStatus(
            False, None, None, "best K not identified: the advice names no allowed K that fits its budget"
        )
    advice = recommendation(*values, interval_of(ci.get("c1")), interval_of(ci.get("c3")), ks, number(budget))
    c1, _, c3 = values
    star = 1 + math.sqrt(c3 / c1) if advice.identified else None
    return AdviceStatus(advice.identified, star, advice.K_best, advice.message)


def advice_status(advice: dict) -> AdviceStatus:
    """``status`` of a saved ``group_size_advisor`` entry."""
    return status(advice.get("pooled") or {}, advice.get("ci95") or {}, advice.get("allowed_K"), advice.get("budget"))


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
        diag = np.diag(gram) - np.asarray(batch.within_each, dtype=np.float64)
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
