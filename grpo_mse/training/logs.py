"""Collect VERL training metrics from console logs and wandb run folders into one long table.

Sources: VERL console lines ``step:5 - val-core/<source>/acc/mean@1:0.42 - ...`` (any prefix such
as Ray's ``(TaskRunner pid=1)`` is ignored), wandb ``files/wandb-history.jsonl`` when present,
otherwise the run's ``run-<id>.wandb`` file. K and the seed come from the run configuration
(``actor_rollout_ref.rollout.n``, ``data.seed``), the run name (``..._K32_seed1``) or the
launcher's header line (``GROUP_SIZE=32 SEED=1``). Output columns: K, seed, step, metric, value.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import warnings

COLUMNS = ["K", "seed", "step", "metric", "value"]
DEFAULT_METRICS = r"^(val-core/|val-aux/.*/acc/|critic/score/mean$|critic/rewards/mean$)"
STEP_LINE = re.compile(r"(?:^|\s|\))step:(\d+) - (.*)$")
WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\((.*)\)$")  # np.float64(0.5), tensor(0.5)
NAME_K = re.compile(r"(?:^|[^A-Za-z0-9])K(\d+)(?![0-9])")
NAME_SEED = re.compile(r"seed[_-]?(\d+)", re.IGNORECASE)
HEADER_K = re.compile(r"GROUP_SIZE=(\d+)")
HEADER_SEED = re.compile(r"\bSEED=(\d+)")
LOG_EXTENSIONS = (".log", ".txt", ".out")
SKIP_DIRS = {"hf_cache", "checkpoints", "wandb_cache", "wandb_data", "wandb_config"}


def parse_value(text: str) -> float | None:
    """A logged number (``0.42``, ``np.float64(0.42)``, ``tensor(0.42)``) as float, or None."""
    text = text.strip()
    wrapped = WRAPPED.match(text)
    if wrapped:
        text = wrapped.group(1).split(",")[0].strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_console(text: str) -> list[tuple[int, str, float]]:
    """``(step, metric, value)`` from every VERL console metric line in ``text``."""
    records = []
    for line in text.splitlines():
        found = STEP_LINE.search(line)
        if not found:
            continue
        step = int(found.group(1))
        for part in found.group(2).split(" - "):
            name, sep, raw = part.rpartition(":")
            value = parse_value(raw) if sep else None
            if name and value is not None:
                records.append((step, name.strip(), value))
    return records


def _nested(config: dict, dotted: str):
    node = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
        if isinstance(node, dict) and "value" in node and set(node) <= {"value", "desc"}:  # wandb config.yaml
            node = node["value"]
    return node


def run_identity(name: str = "", config: dict | None = None, header: str = "") -> tuple[int | None, int]:
    """(K, seed) of a run from its config, else its name, else the launcher header; seed defaults to 0."""
    config = config or {}
    k = _nested(config, "actor_rollout_ref.rollout.n")
    seed = _nested(config, "data.seed")
    for pattern, text in ((NAME_K, name), (HEADER_K, header)):
        if k is None and text and pattern.search(text):
            k = int(pattern.search(text).group(1))
    for pattern, text in ((NAME_SEED, name), (HEADER_SEED, header)):
        if seed is None and text and pattern.search(text):
            seed = int(pattern.search(text).group(1))
    return (int(k) if k is not None else None), int(seed or 0)


def read_console_run(path: str) -> tuple[int | None, int, list]:
    """(K, seed, records) of one console log file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    k, seed = run_identity(os.path.basename(path), header="\n".join(text.splitlines()[:20]))
    return k, seed, parse_console(text)


def _history_jsonl(path: str) -> list:
    """Records of a wandb history file; an unreadable (e.g. torn) line is skipped with a warning."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            try:
                row = json.loads(line) if line.strip() else {}
            except ValueError:
                row = None
            if not isinstance(row, dict):
                warnings.warn(f"{path}: skipping unreadable line {number}", stacklevel=2)
                continue
            step = row.get("_step")
            for key, raw in row.items():
                value = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
                if step is not None and value is not None and not key.startswith("_"):
                    records.append((int(step), key, float(value)))
    return records


def _run_file(run_dir: str, name: str) -> str | None:
    """``run_dir/files/name`` or (older wandb) ``run_dir/name`` if either exists."""
    for path in (os.path.join(run_dir, "files", name), os.path.join(run_dir, name)):
        if os.path.exists(path):
            return path
    return None


def read_wandb_run(run_dir: str) -> tuple[int | None, int, list]:
    """(K, seed, records) of one wandb run folder (``run-*`` or ``offline-run-*``)."""
    name, config, records, summary = os.path.basename(run_dir), {}, [], {}
    binaries = sorted(glob.glob(os.path.join(run_dir, "*.wandb")))
    if binaries:
        try:
            from grpo_mse.training.wandb_records import read_wandb_file

            run = read_wandb_file(binaries[0])
            name, config, records, summary = run["name"] or name, run["config"], run["history"], run["summary"]
        except (ImportError, ValueError, OSError) as exc:
            warnings.warn(f"cannot read {binaries[0]}: {exc}", stacklevel=2)
    history, summary_path, config_path = (
        _run_file(run_dir, f) for f in ("wandb-history.jsonl", "wandb-summary.json", "config.yaml")
    )
    if history:
        records = _history_jsonl(history)
    if summary_path:
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
    if not config and config_path:
        import yaml

        with open(config_path, encoding="utf-8") as f:
            config = yaml.safe_load(f) or {}
    step = summary.get("_step")
    if step is not None:
        seen = {(s, m) for s, m, _ in records}
        for key, raw in summary.items():
            if isinstance(raw, (int, float)) and not key.startswith("_") and (int(step), key) not in seen:
                records.append((int(step), key, float(raw)))
    k, seed = run_identity(name, config)
    return k, seed, records


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


def merge_same_run(runs: dict, identity: tuple[int, int], path: str, records: dict) -> None:
    """Add ``records`` {(step, metric): value} of ``path`` to ``runs[identity]``. Two sources of one run (its
    console log and its wandb folder) agree where they overlap; a disagreement means two runs that cannot be
    told apart, a DataError naming both."""
    from grpo_mse.tables.inputs import DataError

    if identity not in runs:
        runs[identity] = (path, dict(records))
        return
    first, merged = runs[identity]
    clash = [key for key, value in records.items() if key in merged and not math.isclose(merged[key], value,
                                                                                         rel_tol=1e-6, abs_tol=1e-9)]
    if clash:
        k, seed = identity
        raise DataError(f"{first} and {path} both look like K={k} seed={seed} but log different values "
                        f"(e.g. {clash[0][1]} at step {clash[0][0]}); collect them separately or name the runs "
                        f"..._K{k}_seed<N>")
    merged.update(records)


def collect(paths: list[str], metric_regex: str = DEFAULT_METRICS):
    """One DataFrame (COLUMNS) with the selected metrics of every run under ``paths``."""
    import pandas as pd

    from grpo_mse.tables.inputs import DataError

    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise DataError(f"not found: {', '.join(missing)}")
    wanted = re.compile(metric_regex)
    runs: dict[tuple[int, int], tuple[str, dict]] = {}
    for kind, path in find_runs(paths):
        k, seed, records = (read_console_run if kind == "console" else read_wandb_run)(path)
        if k is None:
            if records:
                warnings.warn(f"skipping {path}: cannot tell its group size K", stacklevel=2)
            continue
        kept = {(step, metric): value for step, metric, value in records if wanted.search(metric)}
        if kept:
            merge_same_run(runs, (k, seed), path, kept)
    rows = [(k, seed, step, metric, value) for (k, seed), (_, records) in runs.items()
            for (step, metric), value in records.items()]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["metric", "K", "seed", "step"]).reset_index(drop=True)
