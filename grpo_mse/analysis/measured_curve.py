"""The budgeted error of std-normalised GRPO, measured at each K (the U-statistic decomposition does not apply).

At a budget of N sequences per step, B = N/K prompts, one group each, the step is g_hat = (1/B) sum_b X_b with X
the std-normalised estimate of one group. Against std-GRPO's own target T = E_X t(X), t(x) = g(x)/sqrt(V(1-V))
(the direction it follows as K grows; docs/statistics.md), exactly

    E||g_hat - T||^2 = (K/N) (E_X tr Cov(X | x) + Var_X m(X)) + ||E_X d(X)||^2,   m = E[X | x], d = m - t,

the variance of a mean of B independent prompts' estimates plus the squared bias, which no budget averages away.
Per K: E_X tr Cov from the records; Var_X m = c1 of std-GRPO's per-prompt mean gradients (``error_model.batch_c1``
on their Gram matrix, as c1 from the oracle's); ||E_X d||^2 the mean over within-batch pairs i != j of
<d_hat_i, d_hat_j> (unbiased: different prompts' estimates are independent). The best K is the argmin over the
measured K that divide N, with joint-bootstrap intervals for each K's error relative to the best one's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_mse.analysis import bootstrap, error_model
from grpo_mse.analysis.error_model import BIAS_GRAM
from grpo_mse.gradients.estimators import GRPO_STD
from grpo_mse.tables.records import C1BatchRecord, SavedRecord


@dataclass(frozen=True)
class BudgetedError:
    """[R] arrays (one value per bootstrap row) of std-GRPO's budgeted error at one K (``error_at``)."""

    variance: np.ndarray  # (K/N) (E_X tr Cov(X | x) + Var_X m(X))
    bias2: np.ndarray  # ||E_X d(X)||^2, the squared bias against std-GRPO's own target
    error: np.ndarray  # variance + bias2


PARTS = ("error", "variance", "bias2")  # the saved order of a K's summaries


@dataclass(frozen=True, kw_only=True)
class MeasuredCurve(SavedRecord):
    """Std-GRPO's budgeted error measured at each K (``measured_curve``), saved as the advice's ``measured_curve``
    (numbers as ``error_model.json_value`` saves them; summaries as saved, ``bootstrap.Summary.to_json``). Without
    a measured K only estimator, K ([]) and message are saved; ``from_json`` reads both shapes."""

    estimator: str  # the estimator measured (grpo_std)
    K: list[int]  # the measured K that divide the budget (and are allowed)
    per_K: dict[str, dict] | None = None  # {K: {"error", "variance", "bias2": bootstrap summaries}}, K as text
    K_best: int | None = None  # the best measured K where the intervals identify it, else None
    K_best_point: int | None = None  # the best measured K by the point estimates (None: an error undefined)
    K_best_frequency: dict[str, float] | None = None  # share of bootstrap replicates in which each K is best
    error_over_best: dict[str, dict] | None = None  # {K: summary of its error over the best K's}
    identified: bool | None = None  # whether every other K's ratio interval lies above 1
    message: str  # the verdict in one line
    note: str | None = None  # the module's statement of the error (its docstring's second paragraph)

    def to_json(self) -> dict:
        """The saved object: every field when some K was measured, else estimator, K and message."""
        if not self.K:
            return {"estimator": self.estimator, "K": self.K, "message": self.message}
        return error_model.json_value({name: getattr(self, name) for name in self.__dataclass_fields__})


def grams_of(batches: list[C1BatchRecord], name: str) -> list[C1BatchRecord]:
    """The c1 batches with the Gram matrix of estimator ``name``'s per-prompt means (``estimator_grams``) in
    place of the oracle's, in the shape ``error_model.batch_c1`` reads; [] unless every batch holds it."""
    if not batches or any(name not in (b.estimator_grams or {}) for b in batches):
        return []
    return [b.with_estimator(name) for b in batches]


def pair_mean(weights: np.ndarray, batches: list[C1BatchRecord], position: dict) -> np.ndarray:
    """[R] the weighted mean over within-batch pairs i != j of the Gram entries <v_i, v_j> (the diagonal
    unused): ``error_model.batch_c1`` is (diagonal less within_each) minus this mean, so with within_each set to
    the diagonal it is exactly minus this mean."""
    return -error_model.batch_c1(weights, [b.zeroed() for b in batches], position)


def error_at(records, batches, k: int, budget: int, position: dict, weights: np.ndarray) -> BudgetedError | None:
    """The [R] arrays of std-GRPO's budgeted error at K; None without the grams."""
    std, own = grams_of(batches, GRPO_STD), grams_of(batches, BIAS_GRAM)
    if not std or not own:
        return None
    trace = bootstrap.weighted_mean(weights, bootstrap.column(records, position, lambda r: r.tr_cov[GRPO_STD]))
    variance = k / budget * (error_model.batch_c1(weights, std, position) + trace)
    bias2 = pair_mean(weights, own, position)
    return BudgetedError(variance, bias2, variance + bias2)


def measured_curve(records_by_k: dict, batches_by_k: dict, budget: int, allowed, weights: np.ndarray) -> MeasuredCurve:
    """Std-GRPO's budgeted error at each measured K with 95% BCa intervals, the best K over those that divide N
    (``allowed`` when given), its bootstrap frequency, and whether its intervals identify it."""
    prompts, position = bootstrap.prompt_columns(records_by_k)
    measured = {}
    for k in sorted(records_by_k):
        curve = error_at(records_by_k[k], batches_by_k.get(k, []), k, budget, position, weights)
        # B = N/K prompts of one group each: a K that does not divide the budget leaves a partial group.
        if curve is not None and budget % k == 0 and (not allowed or k in allowed):
            measured[k] = curve
    if not measured:
        return MeasuredCurve(estimator=GRPO_STD, K=[], message="no measured K divides the budget (or no std grams)")
    ks = sorted(measured)
    errors = np.stack([measured[k].error for k in ks], axis=1)  # [R, n_K]
    n_boot = bootstrap.n_boot_of(weights)
    argmin = np.argmin(np.where(np.isnan(errors), np.inf, errors), axis=1)  # a replicate with a nan error: none
    picks = np.where(np.isnan(errors).any(1), np.nan, np.asarray(ks, dtype=np.float64)[argmin])
    best = int(picks[0]) if np.isfinite(picks[0]) else None
    positive = best is not None and bool(errors[0, ks.index(best)] > 0)  # an unbiased estimate may fall below 0
    relative, identified = {}, positive
    for i, k in enumerate(ks):
        if not positive:
            break
        low = errors[:, ks.index(best)]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(low > 0, errors[:, i] / np.where(low > 0, low, 1.0), np.nan)
        summary = bootstrap.summarise(ratio, weights)
        relative[str(k)] = summary.to_json()
        low = (summary.ci95 or [np.nan])[0]
        identified = identified and (k == best or bool(low > 1))
    # Rows 1..n_boot of the weights are the bootstrap draws (row 0 is the data, the jackknife rows follow).
    frequency = {str(k): float(np.mean(picks[1 : 1 + n_boot] == k)) for k in ks}
    if best is None:
        message = "best K not identified: an error is undefined"
    elif not positive:
        message = f"best K not identified: the smallest measured error (K = {best}) is not positive (noise)"
    elif identified:
        message = f"best measured K = {best} (every other measured K's error is larger, 95% intervals above 1)"
    else:
        close = [k for k in ks if k != best and not (relative[str(k)]["ci95"] or [0])[0] > 1]
        message = f"best measured K not identified: K = {best} by the point estimates, not separated from K in {close}"
    return MeasuredCurve(
        estimator=GRPO_STD,
        K=ks,
        per_K={
            str(k): {part: bootstrap.summarise(getattr(measured[k], part), weights).to_json() for part in PARTS}
            for k in ks
        },
        K_best=best if identified else None,
        K_best_point=best,
        K_best_frequency=frequency,
        error_over_best=relative,
        identified=identified,
        message=message,
        # Saved in the JSON: editing the module docstring's second paragraph changes the output files.
        note=__doc__.split("\n\n")[1].replace("\n", " "),
    )


def describe(curve: MeasuredCurve) -> str:
    """Printout lines: the measured error at each K with its interval, then the best K or why none."""
    if not curve.K:
        return f"  std-normalised GRPO (measured at each K): {curve.message}"
    parts = []
    for k in curve.K:
        e = curve.per_K[str(k)]["error"]
        low, high = e["ci95"] or (None, None)
        parts.append(f"K={k}: {bootstrap.rounded(e['estimate'])} [{bootstrap.rounded(low)}, {bootstrap.rounded(high)}]")
    return (
        "  std-normalised GRPO, the run's estimator (budgeted error against its own target, measured at each K; "
        "no decomposition):\n    " + ", ".join(parts) + f"\n    {curve.message}"
    )
