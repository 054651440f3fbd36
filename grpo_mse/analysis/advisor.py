"""Group-size advisor: c1, c2, c3, K* (exact and the paper's) and the best allowed K of a run, with one joint prompt
bootstrap (``bootstrap``) for every constant, K* and best K. The error model, the per-prompt columns and the c1
estimator are ``error_model``'s, the intervals' widening and simulated coverage
``bootstrap``'s; its printout (``describe``, from saved advice) follows ``advise``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from grpo_mse.analysis import bootstrap
from grpo_mse.analysis.bootstrap import (
    CALIBRATED,
    Calibration,
    column,
    interval_widening,
    number,
    prompt_columns,
    rounded,
    simulated_coverage,
)
from grpo_mse.analysis.error_model import (
    Recommendation,
    advice_status,
    allowed_group_sizes,
    batch_c1,
    best_allowed_k,
    interval_of,
    json_value,
    k_star,
    paper_k_star,
    per_prompt_constants,
    recommendation,
    relative_errors,
    slope,
    tail_index,
    tail_share,
)
from grpo_mse.gradients.estimators import GRPO_STD
from grpo_mse.tables.records import C1BatchRecord, PromptRecord, SavedRecord

if TYPE_CHECKING:  # std-GRPO's measured curve: imported only for advice on grpo_std (below)
    from grpo_mse.analysis.measured_curve import MeasuredCurve


@dataclass(frozen=True, kw_only=True)
class GroupSizeAdvice(SavedRecord):
    """The group-size advisor's result (``advise``), saved as ``group_size_advisor`` in run_tracecov's JSON. Numbers
    as saved (``error_model.json_value``: "inf" for +infinity, null for undefined); summaries as saved
    (``bootstrap.Summary.to_json``).

    ``from_json`` reads every shape saved so far: the first advice (no ci95_method, widening, studentized pieces,
    coverage or recommendation), then with the recommendation, the simulated coverage, the clipping flags, the
    estimator, the widening and std-GRPO's measured curve; what an older file lacks is None (and left out again by
    ``to_json``)."""

    per_K: dict[str, dict]  # {K: {"c1", "c2", "c3": summaries, "n_prompts", "n_c1_batches"}}, K as text
    pooled: dict[str, object]  # point estimates of c1, c2, c3, K_star_paper, K_star_exact, K_best (pooled over K)
    ci95: dict[str, object]  # the 95% interval of each pooled value ([low, high] or null)
    ci95_method: dict[str, str] | None = None  # per pooled value: "bca", "studentized" or "studentized-log"
    ci95_below_zero: dict[str, str] | None = None  # c1, c2, c3 whose interval was "clipped" at 0 or "unreliable"
    interval_level: float | None = None  # the level of the studentized intervals when not 0.95 (coverage studies)
    interval_widening: dict[str, list[float]] | None = None  # per calibrated value: [d_lo, d_hi] standard errors
    studentized: dict[str, dict | None] | None = None  # per calibrated value: its unwidened studentized pieces
    simulated_coverage: dict | None = None  # bootstrap.simulated_coverage at this run's T and tail
    c3_slope_per_K: dict | None  # summary of the slope of c3 in K (null with one K)
    budget: int  # N, sequences per step
    allowed_K: list[int]  # the K considered (dividing the budget)
    K_best_frequency: dict[str, float]  # share of replicates in which each K (or "undefined") is best
    relative_error_at_allowed_K: dict[str, dict]  # {K: summary of its exact error over the smallest}
    recommendation: Recommendation | None = None  # what the data support about K
    degenerate_replicates: dict[str, int]  # n_boot and the replicates with c1 <= 0, c3 <= 0 or undefined
    note: str  # how the numbers were computed, in words
    estimator: str | None = None  # the estimator the advice is for (run_statistics' advisor_estimator)
    measured_curve: MeasuredCurve | None = None  # std-GRPO's error measured at each K (advice on grpo_std)

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> GroupSizeAdvice:
        """The advice of a saved ``group_size_advisor`` object (any of the shapes above)."""
        advice = super().from_json(data, where)
        advice = replace(
            advice,
            recommendation=None if advice.recommendation is None else Recommendation.from_json(advice.recommendation),
        )
        if advice.measured_curve is None:
            return advice
        from grpo_mse.analysis.measured_curve import MeasuredCurve

        return replace(advice, measured_curve=MeasuredCurve.from_json(advice.measured_curve))


def k_star_summary(
    c1: np.ndarray,
    c3: np.ndarray,
    d1: np.ndarray,
    d3: np.ndarray,
    weights: np.ndarray,
    level: float = 0.95,
    widen=(0.0, 0.0),
) -> bootstrap.Summary:
    """K*_exact = 1 + sqrt(c3/c1) = 1 + 1/sqrt(q) with a studentized interval for q = c1/c3 (log scale when every
    replicate's q is positive, then the same as studentizing log(K* - 1); natural scale otherwise, so that c1 <= 0
    is inside the interval and K*'s ends at inf). se(q) by the delta method from the weight derivatives ``d1``,
    ``d3`` of c1 and c3: dq = (d1 - q d3) / c3 (their covariance included). Replicates with c3 <= 0 are left out
    (counted in degenerate_replicates). ``widen`` = (d_lo, d_hi) moves K*'s lower and upper end out by that many
    standard errors of q on its scale (q's upper and lower end); ``pieces`` are q's. BCa when the data's own c1 or
    c3 is not positive."""
    k = k_star(c1, c3)
    if not (c1[0] > 0 and c3[0] > 0):
        return replace(bootstrap.summarise(k, weights), interval="bca")
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(c3 > 0, c1 / c3, np.nan)
        se = np.sqrt(bootstrap.influence_covariance(weights, (d1 - q[:, None] * d3) / c3[:, None]))
    # K* falls as q rises: K*'s lower end is q's upper end, so its widening is passed swapped.
    summary = bootstrap.studentized_summary(q, se, weights, log=True, level=level, widen=(widen[1], widen[0]))
    if summary.interval == "bca":
        return replace(bootstrap.summarise(k, weights), interval="bca")
    low, high = summary.ci95
    with np.errstate(divide="ignore"):
        bounds = [1 + 1 / np.sqrt(high) if high > 0 else np.inf, 1 + 1 / np.sqrt(low) if low > 0 else np.inf]
    n_boot = bootstrap.n_boot_of(weights)
    return bootstrap.Summary(
        estimate=float(k[0]),
        ci95=[float(v) for v in bounds],
        n_undefined=int(np.isnan(k[1 : 1 + n_boot]).sum()),
        interval="studentized-log" if summary.interval == "studentized-log" else "studentized",
        pieces=summary.pieces,
    )


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
    *,
    calibration: Calibration,
) -> GroupSizeAdvice:
    """c1, c2, c3 per K and pooled (plain means over K), K* (paper and exact), best allowed K, all with joint
    prompt-bootstrap 95% intervals (``weights``: a ``bootstrap.prompt_weights`` matrix to share with others;
    ``level``: another level for the studentized intervals of the pooled constants and K*, for coverage studies,
    recorded as ``interval_level``; the keys keep their names). The studentized intervals of c1, c2, c3 and K* have
    each end moved out by ``widen`` standard errors ({name: (d_lo, d_hi)}; None: the calibrated
    ``interval_widening``, {}: none), recorded as ``interval_widening``; their unwidened ``studentized`` pieces are
    kept. ``calibration``: the coverage calibration table the caller read (``bootstrap.read_calibration``),
    for the widening and the simulated coverage; advise reads no file."""
    ks = sorted(k for k in records_by_k if records_by_k[k])
    prompts, position = prompt_columns({k: records_by_k[k] for k in ks})
    if weights is None:
        weights = bootstrap.prompt_weights(len(prompts), n_boot, seed)
    columns = {
        name: [column(records_by_k[k], position, lambda r, j=j: per_prompt_constants(r)[j]) for k in ks]
        for j, name in ((0, "c2"), (1, "c3"))
    }
    c2, c3 = (np.stack([bootstrap.weighted_mean(weights, c) for c in columns[name]], axis=1) for name in ("c2", "c3"))
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
                bootstrap.mean_gradient(weights, c, values[:, i]) for i, c in enumerate(columns[name])
            ) / len(ks)
    allowed_k = allowed_group_sizes(budget, allowed)
    pooled["K_star_paper"] = paper_k_star(pooled["c1"], pooled["c3"])
    pooled["K_star_exact"] = k_star(pooled["c1"], pooled["c3"])
    pooled["K_best"] = best_allowed_k(pooled["c1"], pooled["c3"], allowed_k)
    n_boot = bootstrap.n_boot_of(weights)
    best = pooled["K_best"][1 : 1 + n_boot]
    frequency = {str(k): float(np.mean(best == k)) for k in allowed_k if np.any(best == k)}
    if np.any(np.isnan(best)):
        frequency["undefined"] = float(np.mean(np.isnan(best)))  # ties (e.g. c1 = c3 = 0) or undefined constants
    summaries = {name: bootstrap.summarise(values, weights) for name, values in pooled.items()}
    errors = {name: np.sqrt(bootstrap.influence_covariance(weights, derivative[name])) for name in derivative}
    stretch = (
        interval_widening(calibration)
        if widen is None
        else {name: tuple(widen.get(name, (0.0, 0.0))) for name in CALIBRATED}
    )
    # c1 on the natural scale: its estimate can be <= 0 (then larger K are better), which no log scale can hold.
    summaries["c1"] = bootstrap.studentized_summary(
        pooled["c1"], errors["c1"], weights, level=level, widen=stretch["c1"]
    )
    for name in ("c2", "c3"):
        summaries[name] = bootstrap.studentized_summary(
            pooled[name], errors[name], weights, log=True, level=level, widen=stretch[name]
        )
    for name in ("c1", "c2", "c3"):  # >= 0 (a variance, a mean variance, 2 E tr Var zeta_2): clipped, flagged
        summaries[name] = bootstrap.at_least_zero(summaries[name])
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
    if paper.interval != "bca":  # sqrt(c3/c1) = K*_exact - 1: the same interval, shifted
        summaries["K_star_paper"] = replace(
            summaries["K_star_paper"], interval=paper.interval, ci95=[v - 1 for v in paper.ci95]
        )
    relative = relative_errors(pooled["c1"], pooled["c2"], pooled["c3"], allowed_k, budget)
    replicates = pooled["c1"][1 : 1 + n_boot], pooled["c3"][1 : 1 + n_boot]
    point = {name: summaries[name].estimate for name in ("c1", "c2", "c3")}
    advice = recommendation(
        *(math.nan if point[n] is None else point[n] for n in ("c1", "c2", "c3")),
        summaries["c1"].ci95,
        summaries["c3"].ci95,
        allowed_k,
        budget,
    )
    saved = json_value(
        {
            "per_K": {
                str(k): {
                    "c1": bootstrap.at_least_zero(bootstrap.summarise(c1[:, i], weights)),
                    "c2": bootstrap.at_least_zero(bootstrap.summarise(c2[:, i], weights)),
                    "c3": bootstrap.at_least_zero(bootstrap.summarise(c3[:, i], weights)),
                    "n_prompts": len(records_by_k[k]),
                    "n_c1_batches": len(batches_by_k.get(k, [])),
                }
                for i, k in enumerate(ks)
            },
            "pooled": {name: s.estimate for name, s in summaries.items()},
            "ci95": {name: s.ci95 for name, s in summaries.items()},
            "ci95_method": {name: s.interval or "bca" for name, s in summaries.items()},
            "ci95_below_zero": {
                name: "unreliable" if s.unreliable else "clipped"
                for name, s in summaries.items()
                if s.clipped or s.unreliable
            },
            **({} if level == 0.95 else {"interval_level": level}),
            "interval_widening": {name: list(w) for name, w in stretch.items()},
            "studentized": {name: summaries[name].pieces for name in CALIBRATED},
            "simulated_coverage": simulated_coverage(
                tail_index(columns["c2"]), len(prompts), calibration, share=tail_share(columns["c2"])
            ),
            "c3_slope_per_K": bootstrap.summarise(slope(ks, c3), weights) if len(ks) > 1 else None,
            "budget": budget,
            "allowed_K": allowed_k,
            "K_best_frequency": frequency,
            "relative_error_at_allowed_K": {
                str(k): bootstrap.summarise(relative[:, i], weights) for i, k in enumerate(allowed_k)
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
    return GroupSizeAdvice.from_json(saved)


def run_advice(
    records_by_k: dict[int, list[PromptRecord]],
    batches_by_k: dict[int, list[C1BatchRecord]],
    weights: np.ndarray,
    *,
    budget: int,
    allowed,
    estimator: str,
    calibration: Calibration,
) -> GroupSizeAdvice:
    """A tracecov run's advice (``advise``) with the run's bootstrap ``weights``, for training with ``estimator``:
    with std-GRPO (grpo_std) it also holds std-GRPO's ``measured_curve``."""
    advice = advise(
        records_by_k, batches_by_k, budget=budget, allowed=allowed, weights=weights, calibration=calibration
    )
    if estimator != GRPO_STD:
        return replace(advice, estimator=estimator)
    from grpo_mse.analysis.measured_curve import measured_curve  # std-GRPO's special case, imported only for it

    curve = measured_curve(records_by_k, batches_by_k, budget, allowed, weights)
    return replace(advice, estimator=estimator, measured_curve=curve)


# The advice's printout (from saved advice)


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
            summary = bootstrap.at_least_zero(
                bootstrap.Summary(estimate=number(pooled.get(name)), ci95=None if low is None else [low, high])
            )
            low, high = summary.ci95 or (low, high)
            flag = bootstrap.below_zero_flag(replace(summary, **({saved: True} if saved else {})))
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
    if now.identified:
        small = " (below 2: use the smallest allowed K)" if now.K_star_exact < 2 else ""
        stars = (
            f"exact K* = 1+sqrt(c3/c1) = {item('K_star_exact')}{small}; paper's sqrt(c3/c1) = {item('K_star_paper')}"
        )
    else:
        positive = all(number(pooled.get(n)) > 0 and math.isfinite(number(pooled.get(n))) for n in ("c1", "c3"))
        estimate = f" (point estimate {item('K_star_exact')})" if positive else ""
        stars = f"exact K* = 1+sqrt(c3/c1): not identified{estimate}"
    if now.K_best is not None:
        best = f"best K in {advice['allowed_K']} = {now.K_best} ({now.message.split('; ', 1)[-1]})"
    else:
        best = f"K in {advice['allowed_K']}: {now.message}"
    measured = ""
    if advice.get("measured_curve"):
        from grpo_mse.analysis.measured_curve import MeasuredCurve
        from grpo_mse.analysis.measured_curve import describe as describe_curve

        measured = "\n" + describe_curve(MeasuredCurve.from_json(advice["measured_curve"]))
    return (
        f"group-size advisor (95% joint prompt bootstrap{widening_text(advice)}, {bad['n_boot']} replicates; "
        f"{bad['c1<=0']} with c1<=0, {bad['c3<=0']} with c3<=0):\n"
        f"  c1={item('c1')} c2={item('c2')} c3={item('c3')}\n"
        f"  {stars};\n  {best}" + slope_line + calibration_line(calibration) + measured
    )
