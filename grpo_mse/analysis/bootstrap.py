"""Joint prompt bootstrap: one resample of the prompts per replicate, shared by every statistic.

Replicate r gives prompt i the weight W[r, i] = how often it was drawn (multinomial, n draws from n prompts);
row 0 is the data itself (all ones), the last n rows leave one prompt out each (jackknife). Every statistic is a
function of weighted per-prompt values, so the constants, ratios and K* of one replicate all come from the same
prompts, and paired comparisons keep the correlation of estimators evaluated on the same samples.
Intervals: bias-corrected and accelerated (BCa; Efron 1987) percentiles of the replicates, the acceleration from
the jackknife rows; plain percentiles where BCa is undefined (e.g. infinite values). Ratios and means of
per-prompt values use the studentized bootstrap instead (``ratio_summary``): BCa percentiles undercover when a few
prompts carry much of the sum (docs/statistics.md: coverage table).

Also here, last: the coverage calibration of the group-size advisor's intervals (``coverage_calibration.json``,
written by scripts/coverage_heavy_tails.py --merge): the widening of each studentized interval, and the coverage
simulated at a run's T and tail index. The table is an input of the advice: its caller reads it
(``read_calibration``) and passes it to ``advisor.advise``, which reads no file.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from grpo_mse.tables.records import PromptRecord, SavedRecord

NORMAL = NormalDist()


@dataclass(frozen=True, kw_only=True)
class Pieces(SavedRecord):
    """What a bootstrap-t interval is made of (``studentized_pieces``), on the statistic's scale."""

    scale: str  # "log" or "natural"
    value: float  # T (log T on the log scale)
    error: float  # se (se / T on the log scale)
    t: list[float]  # [t_lo, t_hi]: quantiles of t_r = (T_r - T) / se_r over the bootstrap rows


@dataclass(frozen=True, kw_only=True)
class Summary(SavedRecord):
    """A statistic with its 95% bootstrap interval (``summarise``, ``studentized_summary``, ``ratio_summary``,
    ``at_least_zero``); what a field does not apply to is None and left out of the saved object."""

    estimate: float | None  # the data's value (row 0); None when undefined
    ci95: list[float] | None  # the 95% interval; None with one prompt or too many undefined replicates
    n_undefined: int | None = None  # bootstrap replicates that gave nan
    interval: str | None = None  # "bca", "studentized" or "studentized-log" where the method is stated
    pieces: Pieces | None = None  # a studentized interval's parts
    clipped: bool | None = None  # True: the interval reached below 0 and was clipped (a quantity >= 0)
    unreliable: str | None = None  # why: the estimate or the whole interval fell below 0

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> Summary:
        """The summary of a saved object (its pieces read too)."""
        found = super().from_json(data, where)
        return found if found.pieces is None else replace(found, pieces=Pieces.from_json(found.pieces, where))


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


def bca_levels(estimate: float, boot: np.ndarray, jackknife: np.ndarray, level: float) -> tuple[float, float]:
    """BCa percentile levels: Phi(z0 + (z0 + z) / (1 - a (z0 + z))) at z = Phi^-1(tail), Phi^-1(1 - tail);
    z0 = Phi^-1(share of replicates below the estimate), a = skewness of the jackknife values / 6."""
    tail = (1 - level) / 2
    below = (np.sum(boot < estimate) + 0.5 * np.sum(boot == estimate)) / len(boot)
    if not (np.isfinite(estimate) and np.isfinite(jackknife).all() and np.isfinite(boot).all() and 0 < below < 1):
        return tail, 1 - tail
    z0 = NORMAL.inv_cdf(below)
    # Deviations from the first value: equal values give exact zeros (a = 0), where their float mean may round
    # off the value and leave equal one-ulp spreads, whose skewness 1 / (6 sqrt(n)) is rounding alone.
    centred = jackknife - jackknife[:1]
    spread = centred.mean() - centred
    denominator = 6 * float((spread**2).sum()) ** 1.5
    a = float((spread**3).sum()) / denominator if denominator > 0 else 0.0
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
    boot, jackknife = np.asarray(draws[1 : 1 + n_boot], dtype=np.float64), np.asarray(draws[1 + n_boot :])
    boot = boot[~np.isnan(boot)]
    if not len(boot) or len(boot) < 0.5 * n_boot:
        return None
    estimate = float(draws[0])
    low, high = bca_levels(estimate, boot, jackknife, level)
    values = np.quantile(boot, [low, high], method="inverted_cdf")
    if np.isnan(estimate):
        return [float(values[0]), float(values[1])]
    return [min(float(values[0]), estimate), max(float(values[1]), estimate)]  # never excludes its own estimate


def ratio_of_means(weights: np.ndarray, numerator, denominator=None) -> tuple[np.ndarray, np.ndarray]:
    """[R] ratio R = sum w a / sum w b over the prompts where both are finite (b = 1: the mean of a) and [R] its
    delta-method standard error sqrt(sum w (a - R b)^2 / (n (n - 1))) / mean_w b, n = sum w (each row's own)."""
    a = np.asarray(numerator, dtype=np.float64)
    b = np.ones_like(a) if denominator is None else np.asarray(denominator, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    w, a, b = weights[:, keep], a[keep], b[keep]
    n = w.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        top, bottom = w @ a, w @ b
        ratio = np.where(bottom != 0, top / np.where(bottom != 0, bottom, 1), np.nan)
        spread = w @ (a * a) - 2 * ratio * (w @ (a * b)) + ratio**2 * (w @ (b * b))
        se = np.sqrt(np.maximum(spread, 0) / (n * (n - 1))) / np.abs(bottom / n)
    return ratio, np.where(n > 1, se, np.nan)


def t_quantiles(t: np.ndarray, n_boot: int, level: float = 0.95) -> tuple[float, float] | None:
    """(t_lo, t_hi): the (1 - level)/2 and (1 + level)/2 quantiles of the replicates' studentized values ``t``
    (nan = undefined, left out; +-inf allowed: a replicate beyond any finite value); None when more than half the
    replicates are undefined."""
    t = t[~np.isnan(t)]
    if len(t) < 0.5 * n_boot:
        return None
    tail = (1 - level) / 2
    method = "linear" if np.isfinite(t).all() else "inverted_cdf"  # no interpolation between inf and a number
    t_low, t_high = np.quantile(t, [tail, 1 - tail], method=method)
    return float(t_low), float(t_high)


def studentized_pieces(
    estimates: np.ndarray, errors: np.ndarray, weights: np.ndarray, level: float = 0.95, log: bool = False
) -> Pieces | None:
    """What a bootstrap-t interval is made of, with T = row 0; the log scale when ``log`` and every value is
    positive; None when T, se or the quantiles are undefined."""
    n_boot = n_boot_of(weights)
    values, errors = np.asarray(estimates[: 1 + n_boot], dtype=np.float64), np.asarray(errors[: 1 + n_boot])
    log = log and bool(np.all(values[np.isfinite(values)] > 0))
    if log:
        values, errors = np.log(values), errors / values  # se(log T) = se(T) / T
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (values[1:] - values[0]) / errors[1:]
    found = t_quantiles(np.where(np.isfinite(t), t, np.nan), n_boot, level)
    if found is None or not (np.isfinite(values[0]) and np.isfinite(errors[0])):
        return None
    scale = "log" if log else "natural"
    return Pieces(scale=scale, value=float(values[0]), error=float(errors[0]), t=list(found))


def pieces_interval(pieces: Pieces, widen=(0.0, 0.0)) -> list[float]:
    """The interval of ``studentized_pieces`` on the statistic's own scale, each end moved out by ``widen`` = (d_lo,
    d_hi) standard errors: [T - (t_hi + d_lo) se, T - (t_lo - d_hi) se] (exponentiated on the log scale)."""
    value, error, (t_low, t_high) = pieces.value, pieces.error, pieces.t
    with np.errstate(invalid="ignore", over="ignore"):
        bounds = [value - (t_high + widen[0]) * error, value - (t_low - widen[1]) * error]
        return [float(np.exp(v)) if pieces.scale == "log" else float(v) for v in bounds]


def studentized_interval(
    estimates: np.ndarray, errors: np.ndarray, weights: np.ndarray, level: float = 0.95, log: bool = False
) -> list[float] | None:
    """Bootstrap-t interval [T - t_hi se, T - t_lo se] with t_r = (T_r - T) / se_r over the bootstrap rows
    (T = row 0); on the log scale (se / T) when ``log`` and every value is positive (ratios of positive MSEs);
    None when more than half the replicates are undefined."""
    pieces = studentized_pieces(estimates, errors, weights, level, log)
    return None if pieces is None else pieces_interval(pieces)


def mean_gradient(weights: np.ndarray, values, mean: np.ndarray) -> np.ndarray:
    """[R, n] derivative of ``weighted_mean(weights, values)`` (= ``mean``) in each prompt's weight:
    (x_i - mean) / sum_j W_rj over the prompts with a finite x (0 elsewhere)."""
    values = np.asarray(values, dtype=np.float64)
    present = np.isfinite(values)
    mass = weights[:, present].sum(1, keepdims=True)
    gradient = np.zeros_like(weights)
    with np.errstate(invalid="ignore", divide="ignore"):
        gradient[:, present] = (values[present][None, :] - np.asarray(mean)[:, None]) / mass
    return gradient


def influence_covariance(weights: np.ndarray, first: np.ndarray, second: np.ndarray | None = None) -> np.ndarray:
    """[R] infinitesimal-jackknife covariance n/(n-1) sum_i W_ri d1_ri d2_ri of two statistics from their [R, n]
    weight derivatives (``second`` omitted: the variance of the first), n = sum_i W_ri. For a statistic unchanged
    when every weight is scaled alike (any mean or ratio of means) this is the delta-method variance; for a
    mean it is sum_i W (x_i - mean)^2 / (n (n - 1))."""
    second = first if second is None else second
    n = weights.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 1, n / (n - 1) * np.einsum("ri,ri,ri->r", weights, first, second), np.nan)


def studentized_summary(
    draws: np.ndarray, errors: np.ndarray, weights: np.ndarray, log: bool = False, level: float = 0.95, widen=(0.0, 0.0)
) -> Summary:
    """``summarise`` with a studentized interval (``studentized_pieces``; log scale when ``log`` and every value is
    positive, else the natural scale; each end moved out by ``widen`` standard errors), its ``pieces`` kept; BCa when
    the estimate's own standard error is undefined."""
    draws = np.asarray(draws, dtype=np.float64)
    pieces = studentized_pieces(draws, errors, weights, level=level, log=log)
    if pieces is None:
        return replace(summarise(draws, weights), interval="bca")
    rows = draws[: 1 + n_boot_of(weights)]
    estimate = float(draws[0])
    return Summary(
        estimate=None if np.isnan(estimate) else estimate,
        ci95=pieces_interval(pieces, widen),
        n_undefined=int(np.isnan(rows[1:]).sum()),
        interval="studentized-log" if pieces.scale == "log" else "studentized",
        pieces=pieces,
    )


def ratio_summary(weights: np.ndarray, numerator, denominator=None, log: bool = True) -> tuple[Summary, np.ndarray]:
    """(summary with a studentized interval, [R] replicate values) of a ratio of means (or a mean: no
    denominator); log scale for positive ratios."""
    ratio, se = ratio_of_means(weights, numerator, denominator)
    estimate = float(ratio[0])
    return (
        Summary(
            estimate=None if np.isnan(estimate) else estimate,
            ci95=studentized_interval(ratio, se, weights, log=log),
            n_undefined=int(np.isnan(ratio[1 : 1 + n_boot_of(weights)]).sum()),
            interval="studentized",
        ),
        ratio,
    )


def summarise(draws: np.ndarray, weights: np.ndarray) -> Summary:
    """Row 0 as the estimate, the BCa interval, and the count of bootstrap replicates that gave nan."""
    draws = np.asarray(draws, dtype=np.float64)
    estimate = float(draws[0])
    return Summary(
        estimate=None if np.isnan(estimate) else estimate,
        ci95=interval(draws, weights),
        n_undefined=int(np.isnan(draws[1 : 1 + n_boot_of(weights)]).sum()),
    )


UNRELIABLE = "estimate or interval below 0 for a quantity >= 0: too few prompts for this interval"


def at_least_zero(summary: Summary) -> Summary:
    """The summary of a parameter >= 0 (a mean MSE, a ratio of them, ||E s||^2, the advisor's c1, c2, c3), whose
    unbiased estimates can be negative with few prompts: its interval clipped at 0 (``clipped``), and
    ``unreliable`` when the estimate or the whole interval fell below 0."""
    estimate, ci = summary.estimate, summary.ci95
    if ci and ci[0] < 0:
        summary = replace(summary, ci95=[0.0, max(ci[1], 0.0)], clipped=True)
    if (estimate is not None and estimate < 0) or (ci and ci[1] < 0):
        summary = replace(summary, unreliable=UNRELIABLE)
    return summary


def below_zero_flag(summary: Summary) -> str:
    """The printed mark of an ``at_least_zero`` summary: " (unreliable: below 0)", " (clipped at 0)" or ""."""
    return " (unreliable: below 0)" if summary.unreliable else " (clipped at 0)" if summary.clipped else ""


# The bootstrap's units (one column per prompt) and saved numbers read back


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


def number(value) -> float:
    """A saved advisor number back as a float: "inf"/"-inf" -> +-inf; None, other text, bools and other types
    -> nan (undefined)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, np.integer, np.floating)):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


def rounded(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures ('-' for None / nan, 'inf' for +infinity or "inf")."""
    value = number(value)
    if math.isnan(value):
        return "-"
    return f"{value:.{digits}g}"


# The coverage calibration of the advisor's studentized intervals.

CALIBRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coverage_calibration.json")


CALIBRATED = ("c1", "c2", "c3", "K_star_exact")  # the intervals whose coverage the calibration table gives


T_TOLERANCE = 1.25  # a calibration cell applies to runs with T within this factor of its own


class Calibration(NamedTuple):
    """A calibration table as read: where it was looked for, and its contents (None: no file there)."""

    path: str
    table: dict | None


def read_calibration(path: str = CALIBRATION) -> Calibration:
    """The calibration table at ``path`` (the committed one by default); ``table`` None when there is no file."""
    if not os.path.exists(path):
        return Calibration(path, None)
    with open(path, encoding="utf-8") as handle:
        return Calibration(path, json.load(handle))


def as_calibration(calibration: Calibration | str) -> Calibration:
    """``calibration`` itself, or the table read from it when it is a path."""
    return calibration if isinstance(calibration, Calibration) else read_calibration(calibration)


def interval_widening(calibration: Calibration | str = CALIBRATION) -> dict[str, tuple[float, float]]:
    """The calibrated widening (d_lo, d_hi) of each studentized interval: its lower and upper end move out by that
    many standard errors, t_hi + d_lo and t_lo - d_hi in place of the bootstrap-t quantiles (``widening`` in the
    calibration table, scripts/coverage_heavy_tails.py --merge); (0, 0) for a statistic it does not list or
    without a table. ``calibration``: a read table or its path."""
    table = as_calibration(calibration).table
    found = (table.get("widening") or {}) if table is not None else {}
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


@dataclass(frozen=True, kw_only=True)
class SimulatedCoverage(SavedRecord):
    """The coverage simulated at a run's T and tail (``simulated_coverage``; the advice's ``simulated_coverage``).
    Calibrated: the cells that apply and per statistic the coverage range; unknown: the reason."""

    tail_index: float | None  # the Hill tail index of the per-prompt c2 (None: undefined)
    largest_prompt_share: float | None  # the largest prompt's share of c2 (for the printout)
    T: int  # the run's prompts
    status: str  # "calibrated" or "unknown"
    reason: str | None = None  # why unknown
    T_match: str | None = None  # "near" or "between" (``cells_at``)
    cells: list[dict] | None = None  # the cells used: T, tail, runs
    coverage: dict[str, dict] | None = None  # per statistic {"low", "high": coverage range, "mc_se"}
    source: str | None = None  # where the calibration comes from


def simulated_coverage(
    index: float, n_prompts: int, calibration: Calibration | str = CALIBRATION, share: float | None = None
) -> SimulatedCoverage:
    """The simulated coverage of the c1, c2, c3 and K* intervals (as widened by ``interval_widening``) at this run's T
    and tail, from the calibration cells (scripts/coverage_heavy_tails.py --merge; ``calibration``: a read table or
    its path; one per simulated tail shape and T) that apply: T within a factor T_TOLERANCE of the cell's, or,
    between two simulated T, the cells of both (``cells_at``); and the Hill tail index of the per-prompt c2
    (``tail_index``) within the 5-95% range of the cell's runs. Per statistic the lowest and highest coverage over
    those cells (the data cannot say which tail shape produced them) and the largest Monte Carlo standard error.
    ``status`` "unknown" (with a ``reason``) when no cell applies or the index is undefined: never the nearest cell.
    ``share`` (the largest prompt's share of c2) is recorded for the printout."""
    found = {
        "tail_index": None if index is None or not np.isfinite(index) else float(index),
        "largest_prompt_share": None if share is None or not np.isfinite(share) else float(share),
        "T": n_prompts,
    }
    if found["tail_index"] is None:
        return SimulatedCoverage(**found, status="unknown", reason="the tail index of the per-prompt c2 is undefined")
    calibration = as_calibration(calibration)
    if calibration.table is None:
        return SimulatedCoverage(**found, status="unknown", reason=f"no calibration table at {calibration.path}")
    cells = [c for c in calibration.table.get("cells") or [] if "index_range" in c]
    near, how = cells_at(n_prompts, cells)
    if not near:
        return SimulatedCoverage(**found, status="unknown", reason=f"no calibration cell at T = {n_prompts}")
    inside = [c for c in near if c["index_range"][0] <= index <= c["index_range"][1]]
    if not inside:
        return SimulatedCoverage(
            **found, status="unknown", reason=f"no simulated tail at T = {n_prompts} has tail index {index:.3g}"
        )
    coverage = {
        name: {
            "low": min(c["coverage"][name]["coverage"] for c in inside),
            "high": max(c["coverage"][name]["coverage"] for c in inside),
            "mc_se": max(c["coverage"][name]["mc_se"] for c in inside),
        }
        for name in CALIBRATED
        if all(name in c["coverage"] for c in inside)
    }
    return SimulatedCoverage(
        **found,
        status="calibrated",
        T_match=how,
        cells=[{key: c[key] for key in ("T", "tail", "runs")} for c in inside],
        coverage=coverage,
        source="grpo_mse/analysis/coverage_calibration.json (scripts/coverage_heavy_tails.py)",
    )
