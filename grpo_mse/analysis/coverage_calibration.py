"""The coverage calibration of the group-size advisor's intervals (``coverage_calibration.json``, written by
scripts/coverage_heavy_tails.py --merge): the widening of each studentized interval, and the coverage simulated
at a run's T and tail index. The table is an input of the advice: its caller reads it (``read_calibration``) and
passes it to ``advisor.advise``, which reads no file.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from grpo_mse.tables.records import SavedRecord

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
