"""The heavy-tail study of the group-size advisor's 95% intervals (scripts/coverage_heavy_tails.py, which
describes it): exact prompt types, score-scale laws, simulated runs and their records, the advisor's z and
bootstrap-t quantiles per run, coverage per cell, the widening fitted on the cells, and the check of a
calibration table against other cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from grpo_mse.analysis.bootstrap import CALIBRATED
from grpo_mse.gradients import estimators as est
from grpo_mse.tables.records import SavedRecord
from studies.advisor.simulated_records import simulated_batch, simulated_prompt

if TYPE_CHECKING:
    from grpo_mse.analysis.advisor import GroupSizeAdvice

TYPES, OUTCOMES, DIM, M, K_LIST, BATCH = 30, 3, 4, 8, (2, 4), 16
NAMES = (est.VANILLA, est.GRPO, est.ORACLE)
FIELDS = ("z", "t_lo", "t_hi", "below", "above")  # per statistic in a run's row, after the share and tail index
TARGET_MISS = 0.025  # each end of a widened interval misses the truth at most this often in every calibration cell
WIDENINGS = np.round(np.arange(0.0, 20.0001, 0.05), 2)  # the widenings tried (standard errors added to an end)
QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)


class Tail(NamedTuple):
    """A score-scale law: ``sample`` draws s, ``moments`` gives (E s, E s^2) in closed form."""

    family: str
    parameter: float

    def sample(self, rng, n: int) -> np.ndarray:
        if self.family == "lognormal":
            return np.exp(self.parameter * rng.normal(size=n))
        if self.family == "pareto":
            return (1.0 - rng.random(n)) ** (-1.0 / self.parameter)
        if self.family == "student":
            return np.abs(rng.standard_t(self.parameter, size=n))
        return rng.gamma(self.parameter, size=n)

    def moments(self) -> tuple[float, float]:
        a = self.parameter
        if self.family == "lognormal":
            return math.exp(a * a / 2), math.exp(2 * a * a)
        if self.family == "pareto":
            return a / (a - 1), a / (a - 2)
        if (
            self.family == "student"
        ):  # E|t_nu| = sqrt(nu) Gamma((nu - 1)/2) / (sqrt(pi) Gamma(nu/2)), E t^2 = nu/(nu - 2)
            log_ratio = math.lgamma((a - 1) / 2) - math.lgamma(a / 2)
            return math.sqrt(a / math.pi) * math.exp(log_ratio), a / (a - 2)
        return a, a * (a + 1)

    def label(self) -> str:
        return f"{self.family}:{self.parameter:g}"


@dataclass(frozen=True, kw_only=True)
class Truth(SavedRecord):
    """The exact constants of a simulated population (``truth``; a cell's ``truth``)."""

    c1: float
    c2: float | None = None  # absent in the first cells (c2 was not calibrated then)
    c3: float
    K_star_exact: float  # 1 + sqrt(c3/c1)


@dataclass(frozen=True, kw_only=True)
class Rate(SavedRecord):
    """A simulated coverage with its Monte Carlo error (``rate``)."""

    coverage: float  # hits / runs (nan without runs)
    mc_se: float  # binomial standard error at the add-one estimate (hits + 1) / (runs + 2)


@dataclass(frozen=True, kw_only=True)
class CoverageCell(SavedRecord):
    """One simulated cell (``coverage``; the cells of scripts/coverage_heavy_tails.py's files). ``from_json`` reads
    the three saved shapes (without level and per_run_columns, without per_run_columns, and the current one)."""

    T: int  # prompts per run
    tail: str  # the score-scale law, FAMILY:PARAMETER
    runs: int  # simulated runs
    n_boot: int  # bootstrap replicates per run
    level: float | None = None  # nominal level of the intervals (absent in the first files: 0.95)
    largest_share_quantiles: dict[str, float]  # quantiles (QUANTILES, as text) of the largest prompt's share of c2
    tail_index_quantiles: dict[str, float]  # quantiles of the Hill tail index of c2
    coverage: dict[str, dict]  # per statistic: coverage, mc_se, below, above of the unwidened intervals
    truth: Truth
    per_run_columns: list[str] | None = None  # the columns of per_run (absent in the first files: covered or not)
    per_run: list[list]  # per run its ``run_row``

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> CoverageCell:
        """The cell of a saved file's ``cells`` entry."""
        found = super().from_json(data, where)
        return replace(found, truth=Truth.from_json(found.truth, where))


@dataclass(frozen=True, kw_only=True)
class CoverageCheck(SavedRecord):
    """Printed against actual coverage for one cell (``check``): per statistic {"printed_mean", "actual",
    "within_3_points", "runs_printed_93_or_more", "actual_where_printed_93_or_more", "actual_all_runs",
    "unwidened_all_runs"}."""

    T: int
    tail: str
    runs: int
    unknown: float  # the share of runs printed "unknown"
    c1: dict
    c2: dict | None = None  # absent in the first checks (c2 was not calibrated then)
    c3: dict
    K_star_exact: dict


def population(rng) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(p, G, scores centred under p) per prompt type."""
    types = []
    for _ in range(TYPES):
        p = rng.dirichlet(2 * np.ones(OUTCOMES))
        rewards = np.array([1.0] + [0.0] * (OUTCOMES - 1))
        rng.shuffle(rewards)
        raw = rng.normal(size=(OUTCOMES, DIM))
        types.append((p, rewards, raw - p @ raw))
    return types


def truth(types, scale: Tail) -> Truth:
    """Exact c1, c2, c3 and K*_exact of the population with score scales from ``scale``."""
    from studies.exact import theory  # imports torch: after the flags are parsed

    moments = [theory.exact_moments(p, G, s @ s.T) for p, G, s in types]
    gradients = np.stack([(p * G) @ s for p, G, s in types])
    mean, mean_sq = scale.moments()
    c1 = mean_sq * np.mean((gradients**2).sum(1)) - mean**2 * (gradients.mean(0) ** 2).sum()
    c2 = mean_sq * np.mean([m.sigma_o2 for m in moments])
    c3 = mean_sq * 2 * np.mean([m.var_zeta2 for m in moments])
    return Truth(c1=float(c1), c2=float(c2), c3=float(c3), K_star_exact=float(1 + np.sqrt(c3 / c1)))


def registry_weights(name: str, rewards: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The registry's weights w of estimator ``name`` for rewards [..., K] (V broadcast to [..., 1]), in float64."""
    import torch  # after the flags are parsed

    return est.weights(name, torch.from_numpy(rewards), torch.from_numpy(value)).numpy()


def traces(rng, types, chosen, scales, k):
    """Per-prompt traces over M groups of K (M-1 denominator) and the oracle estimates' means."""
    p = np.stack([types[t][0] for t in chosen])
    G = np.stack([types[t][1] for t in chosen])
    s = np.stack([types[t][2] for t in chosen]) * scales[:, None, None]
    draws = np.minimum(
        (rng.random((len(chosen), M, k))[..., None] > np.cumsum(p, 1)[:, None, None, :]).sum(-1), OUTCOMES - 1
    )
    rewards = np.take_along_axis(G[:, None, :], draws.reshape(len(chosen), 1, -1), 2).reshape(draws.shape)
    scores = np.take_along_axis(s, draws.reshape(len(chosen), -1, 1), 1).reshape(*draws.shape, DIM)
    value = (p * G).sum(1)[:, None, None]
    weights = {n: registry_weights(n, rewards, value) for n in NAMES}
    vectors = {n: np.einsum("tmk,tmkd->tmd", w, scores) for n, w in weights.items()}
    return {n: v.var(1, ddof=1).sum(-1) for n, v in vectors.items()}, vectors[est.ORACLE].mean(1)


def simulated_records(rng, types, n_prompts: int, scale: Tail) -> tuple[dict, dict]:
    """One run's per-prompt records and c1 batches per K, as run_tracecov writes them."""
    chosen, scales = rng.integers(0, TYPES, n_prompts), scale.sample(rng, n_prompts)
    records, batches = {}, {}
    for k in K_LIST:
        per_prompt, means = traces(rng, types, chosen, scales, k)
        records[k] = [
            simulated_prompt(k, i, {n: float(v[i]) for n, v in per_prompt.items()}, V_oracle=0.5)
            for i in range(n_prompts)
        ]
        batches[k] = []
        for start in range(0, n_prompts, BATCH):
            index = list(range(start, min(start + BATCH, n_prompts)))
            gram = means[index] @ means[index].T
            within = (per_prompt[est.ORACLE][index] / M).tolist()
            batches[k].append(simulated_batch(k, index, gram.tolist(), within))
    return records, batches


def run_row(advice: GroupSizeAdvice, true: Truth) -> list:
    """One run: [largest share, tail index of c2, then per calibrated statistic z, t_lo, t_hi, below, above] (None
    for nan). z = (T - truth) / se on the scale of its studentized interval (q = c1/c3 for K*; log or natural) and
    t_lo, t_hi the interval's t quantiles: any widening's coverage follows from them (``misses``). below / above:
    the saved interval lies above / below the truth, used only where it is not studentized (z = None)."""
    from grpo_mse.analysis import bootstrap, error_model

    found = advice.simulated_coverage
    row = [found["largest_prompt_share"], found["tail_index"]]
    for name in CALIBRATED:
        pieces = advice.studentized[name]
        target = true.c1 / true.c3 if name == "K_star_exact" else getattr(true, name)
        z = t_low = t_high = None
        if pieces:
            value, error = bootstrap.number(pieces["value"]), bootstrap.number(pieces["error"])
            z = (value - (math.log(target) if pieces["scale"] == "log" else target)) / error
            t_low, t_high = (bootstrap.number(t) for t in pieces["t"])
        ci = error_model.interval_of(advice.ci95[name])
        value = getattr(true, name)
        row += [z, t_low, t_high, int(ci is None or value < ci[0]), int(ci is None or value > ci[1])]
    return error_model.json_value(row)


def columns(rows: list[list]) -> np.ndarray:
    """[runs, columns] float array of ``run_row`` rows (None -> nan)."""
    return np.array([[math.nan if v is None else float(v) for v in row] for row in rows], dtype=float).reshape(
        len(rows), 2 + len(FIELDS) * len(CALIBRATED)
    )


def misses(rows: np.ndarray, name: str, widen=(0.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
    """([runs] truth below the lower end, [runs] truth above the upper end) of statistic ``name``'s interval with
    each end moved out by ``widen`` = (d_lo, d_hi) standard errors: for c1, c2, c3 the interval [T - (t_hi + d_lo)
    se, T - (t_lo - d_hi) se] misses below when z > t_hi + d_lo, above when z < t_lo - d_hi; K*'s ends are q's
    upper and lower end (K* = 1 + 1/sqrt(q)), so it misses below when z < t_lo - d_lo, above when z > t_hi + d_hi."""
    start = 2 + len(FIELDS) * CALIBRATED.index(name)
    z, t_low, t_high, below, above = rows[:, start : start + len(FIELDS)].T
    d_low, d_high = widen
    with np.errstate(invalid="ignore"):
        if name == "K_star_exact":
            low, high = z < t_low - d_low, z > t_high + d_high
        else:
            low, high = z > t_high + d_low, z < t_low - d_high
    studentized = np.isfinite(z)
    return np.where(studentized, low, below > 0), np.where(studentized, high, above > 0)


def rate(hits: int, runs: int) -> Rate:
    """hits / runs with its binomial standard error sqrt(p (1 - p) / runs) at p = (hits + 1) / (runs + 2) (the
    add-one estimate, so that 300 hits of 300 runs have an error, 0.3%, not 0)."""
    if not runs:
        return Rate(coverage=math.nan, mc_se=math.nan)
    smoothed = (hits + 1) / (runs + 2)
    return Rate(coverage=hits / runs, mc_se=math.sqrt(smoothed * (1 - smoothed) / runs))


def cell_coverage(rows: np.ndarray, widening: dict | None = None) -> dict[str, dict]:
    """Per statistic: the coverage with its MC error and the share of runs missing below / above, with the intervals
    widened by ``widening`` ({name: (d_lo, d_hi)}; none: as the bootstrap gives them)."""
    out = {}
    for name in CALIBRATED:
        low, high = misses(rows, name, (widening or {}).get(name, (0.0, 0.0)))
        out[name] = {
            **rate(int(np.sum(~(low | high))), len(rows)).to_json(),
            "below": float(low.mean()),
            "above": float(high.mean()),
        }
    return out


def simulated_rows(n_prompts: int, runs: int, scale: Tail, n_boot: int, seed: int, level: float = 0.95):
    """(truth, [run_row] per run) for one cell; the advisor's intervals unwidened (widen = {})."""
    from grpo_mse.analysis import advisor
    from grpo_mse.analysis.bootstrap import read_calibration

    calibration = read_calibration()  # the committed table: only its simulated coverage is recorded, not used
    rng = np.random.default_rng(seed)
    types = population(rng)
    true, rows = truth(types, scale), []
    for _ in range(runs):
        records, batches = simulated_records(rng, types, n_prompts, scale)
        seed_r = int(rng.integers(1 << 30))
        advice = advisor.advise(
            records, batches, n_boot=n_boot, seed=seed_r, budget=64, level=level, widen={}, calibration=calibration
        )
        rows.append(run_row(advice, true))
    return true, rows


def coverage(n_prompts: int, runs: int, scale: Tail, n_boot: int, seed: int, level: float = 0.95) -> CoverageCell:
    """One simulated cell: T, tail, runs, quantiles of the largest-prompt share and of the Hill tail index of c2
    (the statistic the advisor matches on), the coverage of the unwidened intervals (with MC error), truth, and
    per run its ``run_row`` (``per_run``, for ``calibration_cells`` and ``check``)."""
    true, per_run = simulated_rows(n_prompts, runs, scale, n_boot, seed, level)
    rows = columns(per_run)

    def quantiles(column):
        values = rows[:, column][np.isfinite(rows[:, column])]
        return dict(zip(map(str, QUANTILES), np.quantile(values, QUANTILES).tolist()))

    return CoverageCell(
        T=n_prompts,
        tail=scale.label(),
        runs=runs,
        n_boot=n_boot,
        level=level,
        largest_share_quantiles=quantiles(0),
        tail_index_quantiles=quantiles(1),
        coverage=cell_coverage(rows),
        truth=true,
        per_run_columns=["largest_share", "tail_index"] + [f"{n}.{f}" for n in CALIBRATED for f in FIELDS],
        per_run=per_run,
    )


def width_ratios(rows: np.ndarray, widening: dict | None) -> dict[str, float | None]:
    """Per statistic the median over the studentized runs of the widened interval's width over the unwidened one's
    on its own scale (log for c2, c3 and usually q): (t_hi + d_lo - t_lo + d_hi) / (t_hi - t_lo)."""
    out = {}
    for name in CALIBRATED:
        start = 2 + len(FIELDS) * CALIBRATED.index(name)
        z, t_low, t_high = rows[:, start : start + 3].T
        added = sum((widening or {}).get(name, (0.0, 0.0)))
        keep = np.isfinite(z) & np.isfinite(t_low) & np.isfinite(t_high) & (t_high > t_low)
        ratio = 1 + added / (t_high[keep] - t_low[keep])
        out[name] = float(np.median(ratio)) if keep.any() else None
    return out


def pooled_cells(raw: list[dict]) -> list[tuple[str, int, np.ndarray]]:
    """(tail, T, [runs, columns]) per simulated (tail, T), the runs of every file of that cell pooled."""
    keys = sorted({(c["tail"], c["T"]) for c in raw}, key=lambda key: (key[1], key[0]))
    return [
        (label, t, columns([r for c in raw if (c["tail"], c["T"]) == (label, t) for r in c["per_run"]]))
        for label, t in keys
    ]


def fit_widening(raw: list[dict]) -> dict[str, list[float | None]]:
    """Per statistic the smallest widenings (d_lo, d_hi) on the grid WIDENINGS (standard errors added to the lower
    and upper end) such that each end misses the truth in at most TARGET_MISS of the runs of every simulated cell
    (None when none on the grid does)."""
    cells = pooled_cells(raw)
    widening = {}
    for name in CALIBRATED:
        ends = []
        for end in (0, 1):

            def worst(w, end=end, name=name):
                return max(float(misses(rows, name, (w, w))[end].mean()) for _, _, rows in cells)

            ends.append(next((float(w) for w in WIDENINGS if worst(w) <= TARGET_MISS), None))
        widening[name] = ends
    return widening


def calibration_cells(raw: list[dict], widening: dict | None = None) -> list[dict]:
    """The calibration table's cells from simulated cells (``coverage`` with ``per_run``; files of one tail and T
    pooled): per (tail, T) the runs, the 5-95% range of their Hill tail index of c2 (where the advisor applies the
    cell), and each interval's coverage with its binomial MC standard error, widened by ``widening``
    (``coverage``) and as the bootstrap gives it (``coverage_unwidened``)."""
    table = []
    for tail_label, t, rows in pooled_cells(raw):
        index = rows[:, 1][np.isfinite(rows[:, 1])]
        table.append(
            {
                "T": t,
                "tail": tail_label,
                "runs": len(rows),
                "index_range": np.quantile(index, [0.05, 0.95]).tolist(),
                "coverage": cell_coverage(rows, widening),
                "coverage_unwidened": cell_coverage(rows),
                "median_width_ratio": width_ratios(rows, widening),
            }
        )
    return table


def check(cell: dict, table: str) -> CoverageCheck:
    """Printed against actual for a ``coverage`` cell from another generator, the intervals widened as ``table``
    says: per statistic, among the runs the table calibrates, the mean printed range (lowest and highest matching
    cell), the actual share covered (with its MC error) and whether it lies within 3 points of the mean printed
    range; the actual share among the runs whose printed lowest coverage is >= 93%; and the share of runs printed
    "unknown"."""
    from grpo_mse.analysis import bootstrap

    rows = columns(cell["per_run"])
    widening = bootstrap.interval_widening(table)
    found = [bootstrap.simulated_coverage(index, cell["T"], table) for index in rows[:, 1]]
    known = np.array([f.status == "calibrated" for f in found], dtype=bool)
    out = {}
    for name in CALIBRATED:
        low, high = misses(rows, name, widening[name])
        hits = ~(low | high)
        printed_low = np.array([f.coverage[name]["low"] if f.status == "calibrated" else np.nan for f in found])
        printed_high = np.array([f.coverage[name]["high"] if f.status == "calibrated" else np.nan for f in found])
        sure = known & (printed_low >= 0.93)
        actual = rate(int(hits[known].sum()), int(known.sum())).to_json() if known.any() else None
        printed = [float(printed_low[known].mean()), float(printed_high[known].mean())] if known.any() else None
        out[name] = {
            "printed_mean": printed,
            "actual": actual,
            "within_3_points": bool(printed and printed[0] - 0.03 <= actual["coverage"] <= printed[1] + 0.03),
            "runs_printed_93_or_more": int(sure.sum()),
            "actual_where_printed_93_or_more": rate(int(hits[sure].sum()), int(sure.sum())).to_json()
            if sure.any()
            else None,
            "actual_all_runs": rate(int(hits.sum()), len(hits)).to_json(),
            "unwidened_all_runs": cell_coverage(rows)[name],
        }
    return CoverageCheck(T=cell["T"], tail=cell["tail"], runs=cell["runs"], unknown=float(1 - known.mean()), **out)


def describe_check(found: CoverageCheck) -> str:
    """printed range (mean over the calibrated runs) against actual per statistic, and the unknown share."""
    parts = [f"unknown {found.unknown:.2f}"]
    for name in CALIBRATED:
        s = getattr(found, name)
        if s["printed_mean"] is None:
            parts.append(f"{name}: nothing printed")
            continue
        low, high = s["printed_mean"]
        parts.append(
            f"{name}: printed {low:.3f}-{high:.3f} actual {s['actual']['coverage']:.3f}+-{s['actual']['mc_se']:.3f}"
            + ("" if s["within_3_points"] else " (more than 3 points off)")
        )
    return "  ".join(parts)
