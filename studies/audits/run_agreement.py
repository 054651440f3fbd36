"""Do two trace-of-covariance runs (run_tracecov.py's ``*_per_prompt.csv``) estimate the same traces?
(scripts/compare_tracecov_runs.py.)

Two questions, two criteria:
- Independent samples (e.g. a CUDA run against the committed CPU run): paired by prompt, for each estimator e
  and K, d_i = trace_a(x_i) - trace_b(x_i) over the prompts both runs hold (same prompt, same oracle V, so the
  prompts' own spread cancels), z = mean d / (sd d / sqrt n). They agree when every |z| <= the normal quantile
  at a 0.1% false-alarm level, Bonferroni over the (e, K) cells.
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
from dataclasses import dataclass
from statistics import NormalDist

from grpo_mse.errors import DataError, UsageError, require
from grpo_mse.tables.records import SavedRecord

LEVEL = 0.001
# Across machines the committed per-K MSEs agree to 1% relative: measured 1e-6 (tiny demo) and 0.15% (the
# paper-regime part's K = 16, one flipped token), so 1% leaves room without hiding a real change.
RERUN_RTOL = 0.01


def read_traces(path: str) -> dict[tuple[str, int, tuple], float]:
    """{(estimator, K, (prompt_index, id)): trace} from a run's ``*_per_prompt.csv`` (prompt_index None when the
    CSV has no such column); ``paired`` chooses what pairs two runs' prompts."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise UsageError(f"file not found: {path}") from None
    require(bool(rows) and {"id", "K", "estimator", "trace"} <= set(rows[0]), f"{path}: not a per-prompt CSV")
    traces: dict[tuple[str, int, tuple], float] = {}
    for row in rows:
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
    by_id = all(len(set(ids_in(run))) == len(ids_in(run)) for run in (a, b))
    if not by_id and any(key[2][0] is None for run in (a, b) for key in run):
        raise DataError(f"{where}: ids repeat and a CSV has no prompt_index column, so the prompts cannot be paired")
    return tuple({(*key[:2], key[2][1] if by_id else key[2]): v for key, v in run.items()} for run in (a, b))


def ids_in(run: dict) -> list:
    """(estimator, K, id) of each trace of a ``read_traces`` result."""
    return [(*key[:2], key[2][1]) for key in run]


@dataclass(frozen=True, kw_only=True)
class Agreement(SavedRecord):
    """The agreement report of two runs (``compare``; compare_tracecov_runs.py --out, which adds the two paths)."""

    cells: list[dict]  # per (estimator, K): prompts, mean_a, mean_b, relative_difference, mean_difference, se, z
    max_abs_z: float  # the largest |z| over the cells
    z_limit: float  # the Bonferroni normal quantile at ``level``
    level: float  # the false-alarm level over all cells
    agree: bool  # |z| <= z_limit everywhere, or with rtol every relative difference within it
    rtol: float | None = None  # the rerun tolerance (a rerun of the same seeds)
    max_abs_relative_difference: float | None = None  # the largest relative difference (with rtol)
    a: str | None = None  # the first run's per-prompt CSV (set by the script)
    b: str | None = None  # the second's
    only_a: int = 0  # (estimator, K, prompt) traces only the first run holds
    only_b: int = 0  # ... only the second
    shared_only: bool = False  # compared on the shared prompts; else differing prompt sets do not agree


def compare(a: dict, b: dict, level: float = LEVEL, rtol: float | None = None, shared_only: bool = False) -> Agreement:
    """The agreement report of two runs' per-prompt traces (see the module docstring): the paired z test, or,
    with ``rtol``, the relative difference of each cell's mean trace (z still reported). Runs whose prompt sets
    differ do not agree unless ``shared_only``."""
    only = {"only_a": len(a.keys() - b.keys()), "only_b": len(b.keys() - a.keys()), "shared_only": shared_only}
    same = shared_only or not (only["only_a"] or only["only_b"])
    cells: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for key, value in a.items():
        if key in b:
            cells.setdefault(key[:2], []).append((value, b[key]))
    cells = {cell: pairs for cell, pairs in cells.items() if len(pairs) >= 2}
    require(bool(cells), "the two runs share no (estimator, K) with at least 2 common prompts")
    limit = NormalDist().inv_cdf(1 - level / (2 * len(cells)))
    report = []
    for (name, k), pairs in sorted(cells.items()):
        n = len(pairs)
        diffs = [x - y for x, y in pairs]
        mean = sum(diffs) / n
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        z = 0.0 if sd == 0 and mean == 0 else (math.copysign(math.inf, mean) if sd == 0 else mean / (sd / math.sqrt(n)))
        mean_a, mean_b = sum(x for x, _ in pairs) / n, sum(y for _, y in pairs) / n
        report.append(
            {
                "estimator": name,
                "K": k,
                "prompts": n,
                "mean_a": mean_a,
                "mean_b": mean_b,
                "relative_difference": (mean_a - mean_b) / max(abs(mean_b), 1e-300),
                "mean_difference": mean,
                "se_mean_difference": sd / math.sqrt(n),
                "z": z,
            }
        )
    worst = max(abs(cell["z"]) for cell in report)
    if rtol is None:
        return Agreement(
            cells=report, max_abs_z=worst, z_limit=limit, level=level, agree=same and worst <= limit, **only
        )
    largest = max(abs(cell["relative_difference"]) for cell in report)
    return Agreement(
        cells=report,
        max_abs_z=worst,
        z_limit=limit,
        level=level,
        agree=same and largest <= rtol,
        rtol=rtol,
        max_abs_relative_difference=largest,
        **only,
    )
