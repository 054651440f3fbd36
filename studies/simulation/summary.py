"""Algorithm 1 (the paper's SGD with a group estimator at a fixed budget N = B K): the summary of saved
records (final held-out reward per estimator and K with Student-t intervals over seeds, paired differences
between estimators, best K, agreement with the advisor's K*). Its settings: ``config.simulation.SimulationConfig``;
the run itself: ``runs.simulation``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from grpo_mse.analysis.error_model import advice_status
from grpo_mse.gradients import estimators as est
from grpo_mse.tables.outputs import mean_ci, t975
from grpo_mse.tables.records import SavedRecord
from studies.simulation.records import SimulationRecord


@dataclass(frozen=True, kw_only=True)
class TStats(SavedRecord):
    """mean, sd, Student-t 95% half-width and n of some runs' values (``t_stats``), undefined values None."""

    mean: float | None  # mean over the runs
    sd: float | None  # their standard deviation (ddof 1; None for one run)
    ci95: float | None  # the Student-t 95% half-width t_{0.975, n-1} sd / sqrt(n) (None for one run)
    n: int  # number of runs


@dataclass(frozen=True, kw_only=True)
class AdvisorReading(SavedRecord):
    """The advisor's K* and constants as the simulation summary records them (``read_advisor``)."""

    path: str  # the tracecov results JSON read
    K_star: float | None  # the exact K* where the advice identifies it, else None
    K_star_ci95: list | None  # its 95% interval where identified
    K_star_paper: float | None  # the paper's sqrt(c3/c1) = K* - 1 where identified
    K_best: int | None  # the best allowed K where identified and unique
    message: str | None = None  # why K* is or is not identified (absent in the first summaries)
    c1: object  # the pooled constants as saved (a number, "inf" or null)
    c2: object
    c3: object
    config: dict  # the run's model, temperature, top_p, max_new_tokens, T, M


COMMAND_KEYS = ("metric", "note", "config", "wall_s")  # what simulate_algorithm1 adds to the saved summary


@dataclass(frozen=True, kw_only=True)
class SimulationSummary(SavedRecord):
    """The summary of an Algorithm 1 sweep (``summarize``; algorithm1_summary.json, where the command adds
    ``COMMAND_KEYS`` after these). ``from_json`` reads both saved shapes (the first: no paired differences, no
    advisor message)."""

    initial_reward: float  # the held-out reward at step 0
    learning: str  # whether some (estimator, K) ends above the start beyond its 95% interval
    final_reward: dict[str, dict[str, dict]]  # {estimator: {K: saved TStats of the final reward over seeds}}
    paired_differences: dict[str, dict[str, dict]] | None = None  # {"a - b": {K: saved TStats of the per-seed
    # difference}} (absent in the first summaries)
    best_K: dict[str, int]  # {estimator: K with the highest mean final reward}
    K_within_ci_of_best: dict[str, list[int]]  # {estimator: K whose interval overlaps the best one's}
    advisor: AdvisorReading | None  # the advisor's K* compared with (None: none given)
    agreement: dict[str, str]  # {"estimator", "verdict", "statement"}: best K against the advisor's K*

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> SimulationSummary:
        """The summary in a saved algorithm1_summary.json (either shape), without what the command adds
        (``COMMAND_KEYS``)."""
        found = super().from_json({k: v for k, v in data.items() if k not in COMMAND_KEYS}, where)
        advisor = None if found.advisor is None else AdvisorReading.from_json(found.advisor, where)
        return replace(found, advisor=advisor)


# (a, b) pairs compared by paired differences a - b at the same (K, seed): the better estimator first
PAIRS = ((est.ORACLE, est.GRPO), (est.GRPO, est.VANILLA), (est.ORACLE, est.VANILLA))


def final_records(records: list[SimulationRecord]) -> list[SimulationRecord]:
    """The record of the last step of each (K, seed, estimator) run."""
    last = {}
    for record in records:
        run = (record.K, record.seed, record.estimator)
        if run not in last or record.step > last[run].step:
            last[run] = record
    return list(last.values())


def final_table(records: list[SimulationRecord]) -> dict[str, dict[str, TStats]]:
    """{estimator: {K: mean and Student-t 95% half-width of the final held-out reward over seeds}}."""
    values: dict[str, dict[int, list[float]]] = {}
    for record in final_records(records):
        values.setdefault(record.estimator, {}).setdefault(record.K, []).append(record.heldout_reward)
    return {name: {str(K): t_stats(by_k[K]) for K in sorted(by_k)} for name, by_k in values.items()}


def mean_t_ci(values: list[float]) -> dict:
    """``mean_ci`` with the Student-t half-width t_{0.975, n-1} sd / sqrt(n) (for a few seeds)."""
    out = mean_ci(values)
    if out["n"] > 1:
        out["ci95"] = t975(out["n"] - 1) * out["sd"] / math.sqrt(out["n"])
    return out


def t_stats(values: list[float]) -> TStats:
    """mean, sd, Student-t 95% half-width and n of ``values`` (NaN -> None, for JSON)."""
    return TStats(**{key: (None if value != value else value) for key, value in mean_t_ci(values).items()})


def paired_differences(records: list[SimulationRecord]) -> dict[str, dict[str, TStats]]:
    """{"a - b": {K: t_stats of final(a) - final(b) over the seeds run with both}} for the PAIRS present.

    Runs at the same (K, seed) share their prompt and sampling streams (common random numbers), so the
    per-seed difference cancels the noise they share and its interval is narrower than the two separate ones."""
    final = {(r.estimator, r.K, r.seed): r.heldout_reward for r in final_records(records)}
    out = {}
    for a, b in PAIRS:
        by_k: dict[int, list[float]] = {}
        for (name, K, seed), value in sorted(final.items()):
            if name == a and (b, K, seed) in final:
                by_k.setdefault(K, []).append(value - final[(b, K, seed)])
        if by_k:
            out[f"{a} - {b}"] = {str(K): t_stats(by_k[K]) for K in sorted(by_k)}
    return out


def best_group_sizes(table: dict[str, dict]) -> tuple[int, list[int]]:
    """(K with the highest mean final reward, all K whose 95% interval overlaps the best one's); ``table``: {K:
    saved TStats}."""
    best = max(table, key=lambda k: table[k]["mean"])
    floor = table[best]["mean"] - half_width(table[best])
    return int(best), [int(k) for k in table if table[k]["mean"] + half_width(table[k]) >= floor]


def half_width(stats: dict) -> float:
    """95% half-width, 0 when undefined (a single seed)."""
    return stats["ci95"] if stats["ci95"] is not None and stats["ci95"] == stats["ci95"] else 0.0


def nearest_grid_k(k_star: float, K_list) -> int:
    """The K of the grid closest to K* on the log2 scale."""
    return int(min(K_list, key=lambda k: abs(np.log2(k) - np.log2(k_star))))


def agreement(best: int, near_best: list[int], k_star: float | None, K_list) -> tuple[str, str]:
    """(verdict, sentence): "agrees" | "consistent within noise" | "disagrees" | "no K*" between best K and K*."""
    if k_star is None or not np.isfinite(k_star):
        return "no K*", f"best K = {best}; no advisor K* to compare with"
    grid = nearest_grid_k(k_star, K_list)
    if grid == best:
        verdict = "agrees"
    elif grid in near_best:
        verdict = "consistent within noise"
    else:
        verdict = "disagrees"
    return verdict, (
        f"best K = {best} (K within its 95% interval: {near_best}); advisor K* = {k_star:.3g} "
        f"(nearest grid K = {grid}): {verdict}"
    )


def read_advisor(path: str) -> AdvisorReading:
    """K*, its interval and c1, c2, c3 from a tracecov results JSON with a ``group_size_advisor`` entry."""
    import json

    with open(path, encoding="utf-8") as handle:
        result = json.load(handle)
    if "group_size_advisor" not in result:
        raise ValueError(f"{path}: no group_size_advisor entry")
    advice = result["group_size_advisor"]
    config = result.get("config", {})
    ci = advice.get("ci95", {})
    now = advice_status(advice)  # K* only where the advisor identifies it (else None and the message)
    return AdvisorReading(
        path=path,
        K_star=now.K_star_exact,
        K_star_ci95=ci.get("K_star_exact") if now.identified else None,
        K_star_paper=now.K_star_exact - 1 if now.identified else None,
        K_best=now.K_best,
        message=now.message,
        **{c: advice["pooled"].get(c) for c in ("c1", "c2", "c3")},
        config={k: config.get(k) for k in ("model", "temperature", "top_p", "max_new_tokens", "T", "M")},
    )


def learning_statement(table: dict[str, dict], initial: float) -> str:
    """Whether some (estimator, K) ends above the starting reward by more than its 95% half-width (``table``: the
    saved final rewards, {estimator: {K: TStats}})."""
    cells = [
        (stats["mean"] - half_width(stats), name, k, stats["mean"])
        for name, by_k in table.items()
        for k, stats in by_k.items()
    ]
    lower, name, k, mean = max(cells)
    if lower > initial:
        return f"learning happened: e.g. {name} K={k} ends at {mean:.4f} > start {initial:.4f} (beyond its 95% CI)"
    best = max(cells, key=lambda cell: cell[3])
    return (
        f"no measurable learning: no final mean is above the start {initial:.4f} beyond its 95% CI "
        f"(highest: {best[1]} K={best[2]} at {best[3]:.4f})"
    )


def summarize(
    records: list[SimulationRecord], K_list, advisor: AdvisorReading | None = None, reference: str = est.GRPO
) -> SimulationSummary:
    """Final reward (mean, 95% CI over seeds) per estimator and K, best K, and its agreement with the advisor's K*."""
    table = {name: {k: cell.to_json() for k, cell in by_k.items()} for name, by_k in final_table(records).items()}
    best = {name: best_group_sizes(by_k) for name, by_k in table.items()}
    k_star = advisor.K_star if advisor else None
    ref = reference if reference in table else next(iter(table))
    verdict, sentence = agreement(*best[ref], k_star, K_list)
    initial = next(r.heldout_reward for r in records if r.step == 0)
    return SimulationSummary(
        initial_reward=initial,
        learning=learning_statement(table, initial),
        final_reward=table,
        paired_differences={
            pair: {k: cell.to_json() for k, cell in by_k.items()} for pair, by_k in paired_differences(records).items()
        },
        best_K={name: pair[0] for name, pair in best.items()},
        K_within_ci_of_best={name: pair[1] for name, pair in best.items()},
        advisor=advisor,
        agreement={"estimator": ref, "verdict": verdict, "statement": f"{ref}: {sentence}"},
    )
