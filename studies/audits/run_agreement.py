"""Do two trace-of-covariance runs (run_tracecov.py's ``*_per_prompt.csv``) estimate the same traces?
(scripts/compare_tracecov_runs.py; that they are runs of the same prompts and model: ``run_provenance``.)

Two questions, two criteria:
- Independent samples (e.g. a CUDA run against the committed CPU run): paired by prompt over the prompts both
  runs hold (same prompt, same oracle V, so the prompts' own spread cancels), for each estimator e and K two
  paired t tests: of d_i = trace_a(x_i) - trace_b(x_i) (the mean trace the results report), and of
  l_i = log(trace_a(x_i) / trace_b(x_i)) over the prompts whose traces are > 0 in both (a change common to every
  prompt, e.g. every trace times 3: the traces span orders of magnitude across prompts, so the spread of d_i
  hides such a change at a few prompts, while l_i holds it at every prompt). t = mean / (sd / sqrt n); each
  test's limit is Student's t with n - 1 degrees of freedom at a 0.1% false-alarm level, Bonferroni over the
  2 x (e, K) tests (the normal quantile would raise false alarms at a few prompts: ``student_t``).
  They differ when a test passes its limit. Otherwise they agree only when the tests could have seen a
  difference: each cell's log ratio detects a common factor f (every trace times f or divided by f) with
  |log f| = limit x se(mean l), i.e. ``detectable`` = exp(limit x se) - 1; when the largest over the cells is
  above ``tolerance`` (TOLERANCE = 50% unless given; a cell with under 2 usable prompts detects nothing) the
  verdict is "cannot tell". Between independent runs the per-prompt log ratios of these heavy-tailed traces
  spread widely (sd 0.5-3 measured at T 32, M 8: docs/commands.md), so only runs of a few hundred prompts, or
  runs sharing their draws, get there.
- A rerun of the same settings and seeds on another machine (``rtol``): the samples are the same draws, except
  where a float difference flips a sampled token, and a flipped token moves a prompt's trace far more than any
  interval of independent runs expects; so the check is on the per-K numbers the results report. They agree
  when every cell's mean trace over the shared prompts is within ``rtol`` of the other's, relative.
  ``RERUN_RTOL`` is the tolerance the committed results hold to across machines (docs/experiments.md, "Reproducible").

A prompt is its ``id`` when no id repeats within a run's (estimator, K) cell, else its position in the run
(``prompt_index``) with its id: a table whose ids repeat holds several prompts under one id, and pairing by id
alone would keep one of them. Runs whose (estimator, K, prompt) sets differ do not agree (the report counts what
only one run holds) unless ``shared_only``: a shorter run (a smaller --T, the same seed and table) compared with a
longer one on the prompts both hold.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace

from grpo_mse.errors import DataError, UsageError, require
from grpo_mse.tables.records import SavedRecord
from studies.audits.student_t import two_sided_quantile

LEVEL = 0.001
# Across machines the committed per-K MSEs agree to 1% relative: measured 1e-6 (tiny demo) and 0.15% (the
# paper-regime part's K = 16, one flipped token), so 1% leaves room without hiding a real change.
RERUN_RTOL = 0.01
# "agree" promises that a common factor of 1.5 either way would have been seen: coarse enough that a full-size
# run with its draws shared can hold it (the demo against itself or a same-seed rerun detects ~x1.0; a T 32 run
# with bf16's flipped tokens x1.3 to x5.5 by estimator), fine enough to catch the x2 or x3 of a wrong path.
TOLERANCE = 0.5


def read_rows(path: str) -> list[dict]:
    """The rows of a run's ``*_per_prompt.csv`` (UsageError unless it has the columns the comparison reads;
    other columns, e.g. ones a later version adds, are kept and ignored)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise UsageError(f"file not found: {path}") from None
    require(bool(rows) and {"id", "K", "estimator", "trace"} <= set(rows[0]), f"{path}: not a per-prompt CSV")
    return rows


def read_traces(path: str) -> dict[tuple[str, int, tuple], float]:
    """{(estimator, K, (prompt_index, id)): trace} from a run's ``*_per_prompt.csv`` (prompt_index None when the
    CSV has no such column); ``paired`` chooses what pairs two runs' prompts."""
    traces: dict[tuple[str, int, tuple], float] = {}
    for row in read_rows(path):
        key = (row["estimator"], int(row["K"]), (row.get("prompt_index"), row["id"]))
        if key in traces:
            raise DataError(
                f"{path}: two rows for estimator {key[0]}, K {key[1]}, prompt_index {key[2][0]}, id {key[2][1]}; "
                "give each run its own per-prompt CSV"
            )
        traces[key] = float(row["trace"])
    return traces


def paired(a: dict, b: dict, where: str = "the runs") -> tuple[dict, dict]:
    """Two runs' ``read_traces`` with their prompts keyed for pairing: by id when no id repeats within an
    (estimator, K) cell of either run, else by position in the run and id (the module docstring)."""
    by_id = pairs_by_id(a, b)
    if not by_id and any(key[2][0] is None for run in (a, b) for key in run):
        raise DataError(f"{where}: ids repeat and a CSV has no prompt_index column, so the prompts cannot be paired")
    return tuple({(*key[:2], prompt_key(key[2], by_id)): v for key, v in run.items()} for run in (a, b))


def pairs_by_id(a: dict, b: dict) -> bool:
    """True when no id repeats within an (estimator, K) cell of either run: prompts pair by id alone."""
    return all(len(set(ids_in(run))) == len(ids_in(run)) for run in (a, b))


def prompt_key(prompt: tuple, by_id: bool):
    """What pairs a prompt (prompt_index, id) with the other run's: its id, or its position and id."""
    return prompt[1] if by_id else prompt


def ids_in(run: dict) -> list:
    """(estimator, K, id) of each trace of a ``read_traces`` result."""
    return [(*key[:2], key[2][1]) for key in run]


@dataclass(frozen=True, kw_only=True)
class Cell(SavedRecord):
    """One (estimator, K) of two runs on their shared prompts: the mean traces, the paired difference and the
    paired log ratio, each with its t statistic and limit, and the smallest common factor the log ratio detects."""

    estimator: str
    K: int
    prompts: int  # shared prompts
    mean_a: float
    mean_b: float
    relative_difference: float  # (mean_a - mean_b) / mean_b
    mean_difference: float  # mean over prompts of trace_a - trace_b
    se_mean_difference: float
    z: float  # mean_difference / se_mean_difference
    z_limit: float  # Student t (prompts - 1 df) at the Bonferroni level
    log_prompts: int  # prompts whose traces are > 0 in both runs (the log ratio's)
    one_zero: int  # prompts with a zero trace in one run only (left out of the log ratio)
    mean_log_ratio: float | None = None  # mean over log_prompts of log(trace_a / trace_b); None below 2 prompts
    se_log_ratio: float | None = None
    z_log: float | None = None
    z_log_limit: float | None = None  # Student t (log_prompts - 1 df) at the Bonferroni level
    detectable: float = math.inf  # exp(z_log_limit * se_log_ratio) - 1 (inf: under 2 log prompts, or > 1e6)

    def exceeds(self) -> bool:
        """Either paired test beyond its limit."""
        return abs(self.z) > self.z_limit or (self.z_log is not None and abs(self.z_log) > self.z_log_limit)


@dataclass(frozen=True, kw_only=True)
class Agreement(SavedRecord):
    """The agreement report of two runs (``compare``; compare_tracecov_runs.py --out, which adds the two paths)."""

    cells: list[Cell]
    verdict: str  # AGREE, DIFFER or CANNOT_TELL
    agree: bool  # verdict == AGREE
    max_abs_z: float  # the largest |z| of either test over the cells
    max_z_share: float  # the largest |z| / its limit over both tests and the cells (> 1: they differ)
    level: float  # the false-alarm level over all tests
    tolerance: float | None = None  # the largest undetectable factor - 1 an agreement allows (not with rtol)
    max_detectable: float | None = None  # the largest cell's ``detectable`` (not with rtol)
    rtol: float | None = None  # the rerun tolerance (a rerun of the same seeds)
    max_abs_relative_difference: float | None = None  # the largest relative difference (with rtol)
    a: str | None = None  # the first run's per-prompt CSV (set by the script)
    b: str | None = None  # the second's
    only_a: int = 0  # (estimator, K, prompt) traces only the first run holds
    only_b: int = 0  # ... only the second
    shared_only: bool = False  # compared on the shared prompts; else differing prompt sets do not agree
    notes: list[str] | None = None  # what run_provenance could not check (set by the script)

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> Agreement:
        """The report of a saved JSON object, its cells read back as ``Cell`` records."""
        found = super().from_json(data, where)
        cells = [cell if isinstance(cell, Cell) else Cell.from_json(cell, where) for cell in found.cells]
        return replace(found, cells=cells)


AGREE, DIFFER, CANNOT_TELL = "agree", "differ", "cannot tell"


def paired_statistics(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(mean, standard error, t) of the paired values' differences (t 0 for all-equal pairs, +-inf for an
    exact nonzero difference)."""
    n = len(pairs)
    diffs = [x - y for x, y in pairs]
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n)
    t = 0.0 if se == 0 and mean == 0 else (math.copysign(math.inf, mean) if se == 0 else mean / se)
    return mean, se, t


def cell_of(name: str, k: int, pairs: list[tuple[float, float]], tests: int, level: float) -> Cell:
    """A ``Cell`` from the (trace_a, trace_b) pairs of its shared prompts; each test's limit at level / tests."""
    n = len(pairs)
    mean_a, mean_b = sum(x for x, _ in pairs) / n, sum(y for _, y in pairs) / n
    mean, se, z = paired_statistics(pairs)
    logs = [(math.log(x), math.log(y)) for x, y in pairs if x > 0 and y > 0]
    cell = Cell(
        estimator=name,
        K=k,
        prompts=n,
        mean_a=mean_a,
        mean_b=mean_b,
        relative_difference=(mean_a - mean_b) / max(abs(mean_b), 1e-300),
        mean_difference=mean,
        se_mean_difference=se,
        z=z,
        z_limit=two_sided_quantile(level / tests, n - 1),
        log_prompts=len(logs),
        one_zero=sum((x > 0) != (y > 0) for x, y in pairs),
    )
    if len(logs) < 2:
        return cell
    log_mean, log_se, z_log = paired_statistics(logs)
    log_limit = two_sided_quantile(level / tests, len(logs) - 1)
    return replace(
        cell,
        mean_log_ratio=log_mean,
        se_log_ratio=log_se,
        z_log=z_log,
        z_log_limit=log_limit,
        detectable=math.expm1(log_limit * log_se) if log_limit * log_se < math.log(1e6) else math.inf,
    )


def compare(
    a: dict,
    b: dict,
    level: float = LEVEL,
    rtol: float | None = None,
    shared_only: bool = False,
    tolerance: float = TOLERANCE,
) -> Agreement:
    """The agreement report of two runs' per-prompt traces (see the module docstring): the paired tests, or,
    with ``rtol``, the relative difference of each cell's mean trace (the tests still reported). Runs whose
    prompt sets differ do not agree unless ``shared_only``."""
    only = {"only_a": len(a.keys() - b.keys()), "only_b": len(b.keys() - a.keys()), "shared_only": shared_only}
    same = shared_only or not (only["only_a"] or only["only_b"])
    grouped: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for key, value in a.items():
        if key in b:
            grouped.setdefault(key[:2], []).append((value, b[key]))
    grouped = {cell: pairs for cell, pairs in grouped.items() if len(pairs) >= 2}
    require(bool(grouped), "the two runs share no (estimator, K) with at least 2 common prompts")
    tests = 2 * len(grouped)  # two tests per cell, Bonferroni over all
    cells = [cell_of(name, k, pairs, tests, level) for (name, k), pairs in sorted(grouped.items())]
    shares = [abs(c.z) / c.z_limit for c in cells] + [
        abs(c.z_log) / c.z_log_limit for c in cells if c.z_log is not None
    ]
    common = {
        "cells": cells,
        "max_abs_z": max(abs(z) for c in cells for z in (c.z, c.z_log) if z is not None),
        "max_z_share": max(shares),
        "level": level,
        **only,
    }
    if rtol is not None:
        largest = max(abs(c.relative_difference) for c in cells)
        verdict = AGREE if same and largest <= rtol else DIFFER
        return Agreement(
            verdict=verdict, agree=verdict == AGREE, rtol=rtol, max_abs_relative_difference=largest, **common
        )
    detectable = max(c.detectable for c in cells)
    verdict = DIFFER if not same or any(c.exceeds() for c in cells) else AGREE
    if verdict == AGREE and detectable > tolerance:
        verdict = CANNOT_TELL
    return Agreement(verdict=verdict, agree=verdict == AGREE, tolerance=tolerance, max_detectable=detectable, **common)
