"""The collected runs' table (the long CSV of grpo_mse.training.logs: K, seed, step, metric, value, budget, lr,
trainer, status), read and checked, and the runs a comparison of K includes.

Which runs count is one rule, ``select_runs``, for every reader (Figure 5 and Table 2 in grpo_mse.figures.training,
the train demo's summary, k-validation's pilot, sweep and adaptive summaries in studies.advisor.training_runs): a
run counts when its completeness is recorded as complete or was not recorded (interrupted, failed and truncated runs
are left out and listed unless ``include_incomplete``) and it logged the metric at every step the statistic reads; a
run that did not is left out and listed, never compared at a step of its own. The steps read are the statistic's:
Table 2 and the pilot's gain read the common step S (the last step every included run logged the metric, or the
largest of ``steps``); k-validation's per-run metric (``training_runs.run_means``) is a mean over every validation
step after step 0 that the sweep logged, so a run that stopped early is left out rather than averaged over fewer,
earlier steps (which would bias its K towards the untrained policy), and every run averages the same steps. A table
with runs at several budgets, learning rates or trainers is refused. Intervals are 95% Student-t intervals of the
mean over seeds; a single seed has none.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from grpo_mse.errors import DataError
from grpo_mse.tables.outputs import ACCURACY, mean_t_interval
from grpo_mse.training.run_identity import COMPLETE, DEFAULT_SEED, INCOMPLETE, UNRECORDED

SETTINGS = ("budget", "lr", "trainer")
RUN_COLUMNS = (*SETTINGS, "status")

ACCURACY_METRIC = re.compile(r"^val-core/.*/(acc|reward)/mean@\d+$")


def pick_metric(frame, metric: str | None = None) -> str:
    """``metric`` if given, else the first ``val-core/.../acc/mean@N`` metric of the table."""
    metrics = sorted(frame["metric"].unique())
    if metric:
        if metric not in metrics:
            raise ValueError(f"metric {metric!r} not in the table; available: {', '.join(metrics)}")
        return metric
    matches = [m for m in metrics if ACCURACY_METRIC.match(m)] or [m for m in metrics if m.startswith("val-core/")]
    if not matches:
        raise ValueError("no val-core metric in the table; pass metric=... explicitly")
    return matches[0]


def default_steps(frame, n_steps: int = 4) -> list[int]:
    """Up to ``n_steps`` evenly spaced steps logged by every K, always including the last one."""
    per_k = [set(group["step"]) for _, group in frame.groupby("K")]
    common = sorted(set.intersection(*per_k)) if per_k else []
    if len(common) <= n_steps:
        return common
    picks = {common[round(i * (len(common) - 1) / (n_steps - 1))] for i in range(n_steps)}
    return sorted(picks)


def with_run_columns(frame):
    """``frame`` with the collector's run columns (a CSV collected before they existed: blank settings and status
    ``unrecorded``), settings as text so that blanks compare equal."""
    frame = frame.copy()
    for column in RUN_COLUMNS:
        if column not in frame.columns:
            frame[column] = UNRECORDED if column == "status" else ""
        blank = UNRECORDED if column == "status" else ""
        frame[column] = [
            blank if value is None or value != value or value == "" else str(value) for value in frame[column]
        ]
    return frame


def run_label(k: int, seed: int) -> str:
    return f"K={k} seed={'default' if seed == DEFAULT_SEED else seed}"


@dataclass
class Selection:
    """The runs Figure 5 and Table 2 compare, the common step, and every run left out or footnoted."""

    frame: object  # rows of ``metric`` of the included runs
    metric: str
    step: int  # Table 2's step: the last step every included run reached, or the largest of --steps
    steps: list  # Figure 5's steps
    chosen: bool  # step given with --steps
    excluded: list = field(default_factory=list)  # "K=2 seed=1: interrupted (last step 2)"
    incomplete: list = field(default_factory=list)  # included with include_incomplete
    unrecorded: list = field(default_factory=list)  # included, completeness not recorded


def select_runs(frame, metric: str | None = None, steps=None, include_incomplete: bool = False) -> Selection:
    """The runs to compare and the common step (see the module docstring); DataError when none is left."""
    metric = pick_metric(frame, metric)
    sub = with_run_columns(frame[frame["metric"] == metric])
    settings = sub[list(SETTINGS)].drop_duplicates()
    if len(settings) > 1:
        listed = "; ".join(
            ", ".join(f"{c} {v or '?'}" for c, v in zip(SETTINGS, row)) for row in settings.itertuples(index=False)
        )
        raise DataError(
            f"the table holds runs at {len(settings)} settings ({listed}); Figure 5 and Table 2 compare K at one "
            "budget, lr and trainer: collect one sweep"
        )
    excluded, candidates = [], {}
    for (k, seed), run in sub.groupby(["K", "seed"]):
        status, last = run["status"].iloc[0], int(run["step"].max())
        if status in INCOMPLETE and not include_incomplete:
            excluded.append(f"{run_label(k, seed)}: {status} (last step {last})")
        else:
            candidates[(int(k), int(seed))] = (set(run["step"]), status)
    if not candidates:
        raise DataError(f"no complete run logged {metric} ({'; '.join(excluded)}); --include_incomplete includes them")
    if steps:
        drawn, chosen = sorted({int(s) for s in steps}), True
    else:
        drawn, chosen = sorted(set.intersection(*(logged for logged, _ in candidates.values()))), False
        if not drawn:
            raise DataError(f"no step at which every run logged {metric}; choose steps with --steps")
    incomplete, unrecorded = [], []
    for key, (logged, status) in list(candidates.items()):
        missing = [s for s in drawn if s not in logged]
        if missing:
            excluded.append(f"{run_label(*key)}: did not log step {missing[-1]} (last step {max(logged)})")
            del candidates[key]
        elif status in INCOMPLETE:
            incomplete.append(f"{run_label(*key)}: {status}")
        elif status != COMPLETE:
            unrecorded.append(f"{run_label(*key)}: {status}")
    if not candidates:
        raise DataError(f"no run logged {metric} at every step of --steps {' '.join(map(str, drawn))}")
    included = sub[[key in candidates for key in zip(sub["K"].astype(int), sub["seed"].astype(int))]]
    figure_steps = drawn if chosen else default_steps(included[included["step"].isin(drawn)])
    return Selection(included, metric, drawn[-1], figure_steps, chosen, excluded, incomplete, unrecorded)


def interval(values) -> tuple[float, float | None]:
    """(mean, 95% t half-width over seeds); the half-width is None for a single value (no interval)."""
    mean, half = mean_t_interval(values)
    return mean, (half if len(values) > 1 else None)


def pm(mean: float, half: float | None, digits: int = 2) -> str:
    """``mean ± half``, or ``mean ± n/a`` when there is no interval (one seed)."""
    return f"{mean:.{digits}f} ± " + ("n/a" if half is None else f"{half:.{digits}f}")


COLUMNS = ("K", "seed", "step", "metric", "value")


def read_training(path: str, metric: str | None = None):
    """The collected table at ``path``, checked: it exists, has the columns and rows, and holds ``metric``
    (or a default accuracy metric). Problems are one-line DataErrors."""
    import pandas as pd

    if not os.path.isfile(path):
        raise DataError(f"training CSV not found: {path}")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not a readable CSV ({str(error).splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing or frame.empty:
        raise DataError(
            f"{path}: "
            + (f"no {', '.join(missing)} column" if missing else "no rows")
            + " (expected the CSV of Policy_Optimization/collect_runs.py)"
        )
    for column in ("K", "seed", "step", "value"):
        numbers = pd.to_numeric(frame[column], errors="coerce")
        finite = numbers.abs() < math.inf  # False for NaN (not a number) and for infinities
        whole = finite & ((numbers == numbers.round()) if column != "value" else True)
        if not whole.all():
            row = int((~whole).to_numpy().nonzero()[0][0])
            kind = "a finite number" if column == "value" else "a whole number"
            raise DataError(
                f"{path} row {row + 2}: {column} {str(frame[column].iloc[row])!r} is not {kind} "
                "(expected the CSV of Policy_Optimization/collect_runs.py)"
            )
        frame[column] = numbers if column == "value" else numbers.astype(int)
    for column, lowest, meaning in (
        ("K", 1, ">= 1"),
        ("seed", DEFAULT_SEED, f">= 0 ({DEFAULT_SEED}: default)"),
        ("step", 0, ">= 0"),
    ):
        below = (frame[column] < lowest).to_numpy().nonzero()[0]
        if len(below):
            raise DataError(f"{path} row {below[0] + 2}: {column} {frame[column].iloc[below[0]]} must be {meaning}")
    try:
        chosen = pick_metric(frame, metric)
    except ValueError as error:
        raise DataError(f"{path}: {error}") from None
    if ACCURACY.search(chosen):  # an accuracy is a share: Table 2 prints it in percent
        values = frame["value"].where(frame["metric"] == chosen)
        outside = ((values < 0) | (values > 1)).to_numpy().nonzero()[0]
        if len(outside):
            raise DataError(
                f"{path} row {outside[0] + 2}: {chosen} {frame['value'].iloc[outside[0]]} is not an accuracy in [0, 1]"
            )
    return one_row_per_value(with_run_columns(frame), path)


def one_row_per_value(frame, path: str):
    """``frame`` with repeated identical rows dropped; a DataError naming ``path`` when two rows give one run's
    metric at one step different values, or one run (K, seed) two settings or statuses (two runs under one name)."""
    key = ["K", "seed", "step", "metric"]
    per_run = frame.groupby(["K", "seed"])[list(RUN_COLUMNS)].nunique()
    if (per_run > 1).any(axis=None):
        k, seed = per_run[(per_run > 1).any(axis=1)].index[0]
        raise DataError(f"{path}: {run_label(k, seed)} has rows with different {', '.join(RUN_COLUMNS)}: two runs")
    values = frame.groupby(key)["value"].nunique()
    if (values > 1).any():
        k, seed, step, metric = values[values > 1].index[0]
        raise DataError(
            f"{path}: rows of {run_label(k, seed)} give {metric} at step {step} different values (two runs under "
            "one K and seed, or a damaged file); collect the runs again"
        )
    return frame.drop_duplicates(key).reset_index(drop=True)
