"""Collect VERL training metrics from console logs and wandb run folders into one long table.

Sources: VERL console lines ``step:5 - val-core/<source>/acc/mean@1:0.42 - ...`` (any prefix such
as Ray's ``(TaskRunner pid=1)`` or a progress bar's ``\r...29.09it/s]`` is ignored), wandb
``files/wandb-history.jsonl`` when present, otherwise the run's ``run-<id>.wandb`` file (a wandb folder is read by
grpo_mse.training.wandb_records). A run's identity (K, seed, budget, lr, trainer) and completeness come from what
it recorded (grpo_mse.training.run_identity: the run config, TRL's own line, the launcher's
settings and end lines); its name is a label only. Records of one identity are one run (a console log and a wandb
folder of the same run, or the same run in two merged sweep folders); two records that share K and the seed but
differ in another setting, in a logged value or in their planned steps are refused. Output columns: K, seed, step,
metric, value, then the run's budget, lr, trainer and status (``complete``, ``interrupted``, ``failed``,
``truncated``, ``unrecorded``).

What is refused (a one-line DataError naming the file, so the scripts exit 2): a log file that holds two
runs (two launcher headers, or step numbers that go down), a metric line that is torn or garbled (a part
that is not ``name:value``, a kept metric whose value is not a number, a metric twice in one line), a
non-finite value of a kept metric, a ``wandb-summary.json`` that is not a JSON object, a ``config.yaml``
that is not a YAML mapping, a ``_step`` that is not a whole number. What is skipped with a warning: the
unterminated last line of a console log (a run killed mid-write) and unreadable lines of a wandb history.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import DataError, UsageError
from grpo_mse.flags import Flags, option
from grpo_mse.training.run_identity import (
    RunIdentity,
    RunRecord,
    best_status,
    console_status,
    from_console,
)
from grpo_mse.training.wandb_records import read_wandb_run

COLUMNS = ["K", "seed", "step", "metric", "value"]
RUN_COLUMNS = ["budget", "lr", "trainer", "status"]  # one value per run, repeated on its rows
DEFAULT_METRICS = r"^(val-core/|val-aux/.*/acc/|critic/score/mean$|critic/rewards/mean$)"
STEP_LINE = re.compile(r"(?<![\w/@.-])step:(\d+) - (.*)$")  # not inside a name: "]step:1", " step:1"
METRIC_NAME = re.compile(r"[^\s:]+")
STEP_ANYWHERE = re.compile(r"(?<!global_)step:\d+ - ")  # more than one per line: two lines run together
RUN_HEADERS = ("[grpo_train] TRAINER=", "[trl] K=")  # printed once at the start of a run
WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\((.*)\)$")  # np.float64(0.5), tensor(0.5)
NAME_K = re.compile(r"(?:^|[^A-Za-z0-9])K(\d+)(?![0-9])")
NAME_SEED = re.compile(r"seed[_-]?(\d+)", re.IGNORECASE)
LOG_EXTENSIONS = (".log", ".txt", ".out")
HEAD_LINES = 400  # the launcher's and TRL's settings lines come before the first step, among library warnings
SKIP_DIRS = {"hf_cache", "checkpoints", "wandb_cache", "wandb_data", "wandb_config"}


def parse_value(text: str) -> float | None:
    """A logged number (``0.42``, ``np.float64(0.42)``, ``tensor(0.42)``, ``nan``) as float, or None."""
    text = text.strip()
    wrapped = WRAPPED.match(text)
    if wrapped:
        text = wrapped.group(1).split(",")[0].strip()
    try:
        return float(text)
    except ValueError:
        return None


def _data_error(message: str):
    return DataError(message)


def parse_console(text: str, wanted: re.Pattern | str | None = None, source: str = "log") -> list:
    """``(step, metric, value)`` from every VERL console metric line in ``text``.

    With ``wanted`` (a regex of kept metric names) only those are returned, and a line that is garbled
    (see the module docstring), a kept value that is not a finite number, or a second run in the text
    raise a DataError naming ``source`` and the line. Without it every finite value is returned.
    """
    wanted = re.compile(wanted) if isinstance(wanted, str) else wanted
    records, last_step = [], None
    lines = text.splitlines()
    headers = [n for n, line in enumerate(lines, 1) if line.lstrip().startswith(RUN_HEADERS[0])]
    headers = headers or [n for n, line in enumerate(lines, 1) if line.lstrip().startswith(RUN_HEADERS[1])]
    if wanted is not None and len(headers) > 1:
        raise _data_error(
            f"{source} holds {len(headers)} runs (lines {headers[0]} and {headers[1]} start one); "
            "a log must hold one run: collect each run's own log"
        )
    for number, line in enumerate(lines, start=1):
        found = STEP_LINE.search(line)
        starts = len(STEP_ANYWHERE.findall(line))
        if wanted is not None and starts and (not found or starts > 1):
            raise _data_error(
                f"{source} line {number}: two metric lines run together (a torn or interleaved "
                "write?); a log must hold one run written by one process"
            )
        if not found:
            continue
        if number == len(lines) and not text.endswith(("\n", "\r")):
            warnings.warn(
                f"{source}: skipping its unterminated last line {number} (a run stopped mid-write?)", stacklevel=2
            )
            continue
        step, seen = int(found.group(1)), set()
        where = f"{source} line {number}"
        if wanted is not None and last_step is not None and step < last_step:
            raise _data_error(
                f"{where}: step {step} after step {last_step}: the file holds two runs (or a "
                "restarted one); a log must hold one run: collect each run's own log"
            )
        last_step = step
        for part in found.group(2).split(" - "):
            name, sep, raw = part.strip().partition(":")
            if not sep or not METRIC_NAME.fullmatch(name):
                if wanted is None:
                    continue
                raise _data_error(f"{where}: garbled metric line (a torn or interleaved write?) at {part[:60]!r}")
            keep = wanted is None or bool(wanted.search(name))
            if not keep:
                continue
            value = parse_value(raw)
            if wanted is None:
                if value is not None and math.isfinite(value):
                    records.append((step, name, value))
                continue
            if value is None or name in seen:
                problem = "logged twice" if name in seen else f"value {raw.strip()[:40]!r} is not a number"
                raise _data_error(f"{where}: {name} {problem} (a torn or interleaved write?)")
            if not math.isfinite(value):
                raise _data_error(
                    f"{where}: {name} is {value} at step {step}; leave the metric out with --metrics or fix the run"
                )
            seen.add(name)
            records.append((step, name, value))
        if wanted is not None and found.group(2).count("training/global_step:"):
            logged = parse_value(found.group(2).split("training/global_step:")[1].split(" - ")[0])
            if logged != step:
                raise _data_error(
                    f"{where}: training/global_step {logged} in the line of step {step} (a torn or interleaved write?)"
                )
    return records


def name_mismatch(name: str, identity: RunIdentity) -> str | None:
    """A note when the run's name suggests another K or seed than it recorded (the name is a label only)."""
    k, seed = NAME_K.search(name or ""), NAME_SEED.search(name or "")
    wrong = [
        f"{what} {found.group(1)} in the name, {recorded} recorded"
        for what, found, recorded in (("K", k, identity.K), ("seed", seed, identity.seed))
        if found and int(found.group(1)) != recorded
    ]
    return "; ".join(wrong) or None


def read_console_run(path: str, wanted: re.Pattern | str | None = None) -> RunRecord:
    """The RunRecord of one console log file (``wanted``: as for :func:`parse_console`)."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        text = f.read()
    lines = text.splitlines()
    identity, planned = from_console(lines[:HEAD_LINES])
    records = parse_console(text, wanted, source=path)
    return RunRecord(path, os.path.basename(path), identity, planned, console_status(lines), records)


def _is_wandb_run(dirpath: str, filenames: list[str]) -> bool:
    files = os.path.join(dirpath, "files")
    return (
        any(f.endswith(".wandb") for f in filenames)
        or "wandb-history.jsonl" in filenames
        or any(os.path.exists(os.path.join(files, f)) for f in ("wandb-history.jsonl", "wandb-summary.json"))
    )


def find_runs(paths: list[str]) -> list[tuple[str, str]]:
    """``("console" | "wandb", path)`` for every log file and wandb run folder under ``paths``."""
    found, seen = [], set()
    for root in paths:
        if os.path.isfile(root):
            candidates = [("console", root)]
        else:
            candidates = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(
                    d
                    for d in dirnames
                    if not d.startswith(".") and d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d))
                )
                if _is_wandb_run(dirpath, filenames):
                    candidates.append(("wandb", dirpath))
                    dirnames[:] = []
                    continue
                candidates += [
                    ("console", os.path.join(dirpath, f)) for f in sorted(filenames) if f.endswith(LOG_EXTENSIONS)
                ]
        for kind, path in candidates:
            if os.path.realpath(path) not in seen:
                seen.add(os.path.realpath(path))
                found.append((kind, path))
    return found


@dataclass
class Run:
    """One run as collected: its identity, the paths of its records, its status and {(step, metric): value}."""

    identity: RunIdentity
    paths: list
    planned_steps: int | None
    status: str
    values: dict


def _settings_clash(first: RunIdentity, second: RunIdentity) -> str | None:
    for field in ("budget", "lr", "trainer"):
        a, b = getattr(first, field), getattr(second, field)
        if a is not None and b is not None and a != b:
            return f"{field} {a} vs {b}"
    return None


def merge_same_run(runs: dict, record: RunRecord, values: dict) -> None:
    """Add ``record`` (its kept ``values`` {(step, metric): value}) to ``runs``, keyed by (K, seed). Two records of
    one run (its console log and its wandb folder, or one run in two merged sweep folders) agree in every recorded
    setting, planned step count and overlapping value; anything else is two runs that cannot be told apart, a
    DataError naming both."""
    identity, key = record.identity, (record.identity.K, record.identity.seed)
    if key not in runs:
        runs[key] = Run(identity, [record.path], record.planned_steps, record.status, dict(values))
        return
    run = runs[key]
    first = run.paths[0]
    clash = _settings_clash(run.identity, identity)
    if (
        clash is None
        and None not in (run.planned_steps, record.planned_steps)
        and run.planned_steps != record.planned_steps
    ):
        clash = f"planned steps {run.planned_steps} vs {record.planned_steps}"
    if clash is None:
        differ = [
            k
            for k, value in values.items()
            if k in run.values and not math.isclose(run.values[k], value, rel_tol=1e-6, abs_tol=1e-9)
        ]
        clash = (
            f"{differ[0][1]} at step {differ[0][0]}: {run.values[differ[0]]} vs {values[differ[0]]}" if differ else None
        )
    if clash:
        raise DataError(
            f"{first} and {record.path} both record {identity.label().split(' budget')[0]} but differ ({clash}): "
            "two runs, not one; collect each sweep's folder separately"
        )
    run.identity = RunIdentity(
        identity.K,
        identity.seed,
        *(
            getattr(run.identity, f) if getattr(run.identity, f) is not None else getattr(identity, f)
            for f in ("budget", "lr", "trainer")
        ),
    )
    run.paths.append(record.path)
    run.planned_steps = run.planned_steps if run.planned_steps is not None else record.planned_steps
    run.status = best_status(run.status, record.status)
    run.values.update(values)


@dataclass(kw_only=True)
class CollectConfig(Flags):
    """Policy_Optimization/collect_runs.py: which logs and wandb folders to read, which metrics to keep, where."""

    paths: list[str] = option(positional=True, help="log files or folders (searched recursively)")
    out: str = option("results/training_runs.csv", help="output CSV (replaced)")
    metrics: str = option(DEFAULT_METRICS, help="regex of metric names to keep ('.' keeps all)")

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            re.compile(self.metrics)
        except re.error as error:
            raise UsageError(f"argument --metrics: not a regular expression ({error})") from None
        cli.writable_file(self.out, "--out")


def collect(paths: list[str], metric_regex: str = DEFAULT_METRICS):
    """One DataFrame (COLUMNS) with the selected metrics of every run under ``paths``."""
    import pandas as pd

    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise DataError(f"not found: {', '.join(missing)}")
    wanted = re.compile(metric_regex)
    runs: dict[tuple[int, int], Run] = {}
    for kind, path in find_runs(paths):
        record = read_console_run(path, wanted) if kind == "console" else read_wandb_run(path)
        records = record.records
        if record.identity is None:
            if any(wanted.search(metric) for _, metric, _ in records):
                warnings.warn(
                    f"skipping {path}: it records no group size K (no launcher settings line, TRL line or run "
                    "config; a run's name is a label only)",
                    stacklevel=2,
                )
            continue
        mismatch = name_mismatch(record.name, record.identity)
        if mismatch:
            warnings.warn(f"{path}: {mismatch}; the recorded settings win (a name is a label only)", stacklevel=2)
        kept = {(step, metric): value for step, metric, value in records if wanted.search(metric)}
        bad = next(((step, metric, value) for (step, metric), value in kept.items() if not math.isfinite(value)), None)
        if bad:
            raise DataError(
                f"{path}: {bad[1]} is {bad[2]} at step {bad[0]}; leave the metric out with --metrics or fix the run"
            )
        if kept:
            merge_same_run(runs, record, kept)
    rows = [
        (
            run.identity.K,
            run.identity.seed,
            step,
            metric,
            value,
            run.identity.budget,
            run.identity.lr,
            run.identity.trainer,
            run.status,
        )
        for run in runs.values()
        for (step, metric), value in run.values.items()
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS + RUN_COLUMNS)
    return frame.sort_values(["metric", "K", "seed", "step"]).reset_index(drop=True)
