"""Safe resumption and concurrent runs: input fingerprints, settings comparison, unique names, file locks; and
the one run-folder helper of the oracle and tracecov runs built on them (``RunFolder``: claim a unique run name,
save and read its settings, find the newest unfinished run with equal settings), with the tracecov run's resume
(``open_progress``, ``load_progress``): its ranks' progress logs, where each finished record is appended at once.

A run is a stem ``{folder}/{name}_{timestamp}[_n]`` claimed by creating ``stem + marker`` exclusively. Its
settings live in ``stem.settings.json`` (oracle) or on the first line of the marker file as ``{"config": ...}``
(tracecov's rank-0 progress log); resuming needs equal values on the run's result fields.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import sys
from dataclasses import dataclass

from grpo_mse.errors import UsageError
from grpo_mse.tables.inputs import LATER_DEFAULTS, looks_local
from grpo_mse.tables.outputs import append_jsonl, read_complete_jsonl, timestamp, write_json
from grpo_mse.tables.records import C1BatchRecord, PromptRecord


def fingerprint(source: str) -> str:
    """``sha256:<hex>`` of a local file (of every file, by relative path, for a folder); ``hub:<id>`` otherwise."""
    path = os.path.expanduser(source)
    if not looks_local(source) or not os.path.exists(path):
        return f"hub:{source}"
    files = (
        [path]
        if os.path.isfile(path)
        else sorted(os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names)
    )
    digest = hashlib.sha256()
    for name in files:
        if files != [path]:
            digest.update(os.path.relpath(name, path).encode() + b"\0")
        with open(name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def _same(key: str, saved: dict, current: dict) -> bool:
    """Equal values; for ``model``, also one folder named two ways (``./assets/x`` and its absolute path) or
    two names whose recorded content fingerprints are equal."""
    a, b = saved.get(key, LATER_DEFAULTS.get(key)), current.get(key)
    if a == b:
        return True
    if key != "model" or not isinstance(a, str) or not isinstance(b, str):
        return False
    fingerprint = saved.get("model_fingerprint")
    if fingerprint and fingerprint == current.get("model_fingerprint"):
        return True
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def differences(saved: dict, current: dict, keys) -> list[str]:
    """``key (saved X, now Y)`` for every key whose value differs (a model named two ways is one model)."""
    return [
        f"{key} (saved {saved.get(key, LATER_DEFAULTS.get(key))!r}, now {current.get(key)!r})"
        for key in keys
        if not _same(key, saved, current)
    ]


def choose(candidates: list[tuple[str, dict | None]], current: dict, keys, flag: str = "--resume") -> str | None:
    """The newest candidate ``(path, saved settings)`` whose settings equal ``current`` on ``keys``.

    None when there is no candidate; a UsageError naming what differs from the newest one when none
    matches (never a silent new run, append or merge)."""
    for path, saved in reversed(candidates):
        if saved is not None and not differences(saved, current, keys):
            return path
    if not candidates:
        return None
    path, saved = candidates[-1]
    if saved is None:
        raise UsageError(f"cannot {flag} {path}: it records no settings to check; run without {flag}")
    raise UsageError(
        f"cannot {flag} {path}: settings differ: {'; '.join(differences(saved, current, keys))}; "
        f"run without {flag} for a new run"
    )


def claim(stem: str, suffix: str, taken=lambda candidate: False) -> str:
    """Create ``stem + suffix`` exclusively (``stem_2``, ``stem_3``, ... when taken) and return the stem used.

    Two processes started in the same second never share a name; ``taken(candidate_stem)`` may
    reject a stem whose other outputs already exist."""
    for attempt in range(1, 10000):
        candidate = stem if attempt == 1 else f"{stem}_{attempt}"
        if taken(candidate):
            continue
        try:
            os.close(os.open(candidate + suffix, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return candidate
    raise UsageError(f"cannot find a free output name near {stem}")


def lock(path: str):
    """Hold an exclusive lock on ``path`` (created if missing) until the returned handle is closed or the
    process ends; another process already holding it is a UsageError."""
    handle = open(path, "a", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise UsageError(
            f"another process is writing {path}; wait for it to finish or use another output folder"
        ) from None
    return handle


# The run folder


@dataclass(frozen=True)
class RunFolder:
    folder: str
    prefix: str  # every run's stem starts with it: "oracle_v_n" or "tracecov_"
    marker: str  # the file that claims a run: ".jsonl" (the oracle table) or ".progress.rank0.jsonl"
    keys: tuple[str, ...]  # settings that must be equal to resume
    settings_in_marker: bool = False  # True: the first line of the marker file; False: stem.settings.json

    def runs(self) -> list[str]:
        """Stems of the runs in the folder, oldest first (by the marker file's modification time)."""
        pattern = os.path.join(glob.escape(self.folder), glob.escape(self.prefix) + "*" + glob.escape(self.marker))
        return [path[: -len(self.marker)] for path in sorted(glob.glob(pattern), key=os.path.getmtime)]

    def saved_settings(self, stem: str) -> dict | None:
        """The settings a run recorded, or None when missing or unreadable."""
        try:
            with open(stem + (self.marker if self.settings_in_marker else ".settings.json"), encoding="utf-8") as f:
                saved = json.loads(f.readline()).get("config") if self.settings_in_marker else json.load(f)
        except (OSError, ValueError, AttributeError):
            return None
        return saved if isinstance(saved, dict) else None

    def resumable(self, current: dict) -> str | None:
        """Stem of the newest run whose settings equal ``current`` on ``keys``; None when the folder has no run;
        a UsageError naming what differs when none matches."""
        candidates = [(stem + self.marker, self.saved_settings(stem)) for stem in self.runs()]
        chosen = choose(candidates, current, self.keys)
        return None if chosen is None else chosen[: -len(self.marker)]

    def claim(self, name: str, settings: dict) -> str:
        """A fresh stem ``{name}_{timestamp}`` (``_2``, ... when any file of it exists), its marker created here
        and its settings saved."""
        os.makedirs(self.folder, exist_ok=True)

        def taken(stem: str) -> bool:
            return bool(glob.glob(glob.escape(stem) + "[._]*"))

        stem = claim(os.path.join(self.folder, f"{name}_{timestamp()}"), self.marker, taken)
        if self.settings_in_marker:
            append_jsonl(stem + self.marker, {"config": settings})
        else:
            write_json(stem + ".settings.json", settings)
        return stem


def open_progress(
    folder: RunFolder, name: str, settings: dict, resume: bool, rank: int = 0, share=lambda stem: stem
) -> tuple[str, str, object]:
    """(the run's stem, this rank's progress log ``{stem}.progress.rank{rank}.jsonl``, its lock held until the
    run ends): rank 0 takes the newest unfinished run with equal ``settings`` (``resume``) or claims a fresh one
    named ``name``, and ``share`` hands its stem to every rank (``distributed.broadcast_text`` under torchrun); a
    new log starts with ``{"config": settings}``."""
    stem = folder.resumable(settings) if resume and rank == 0 else None
    if rank == 0 and stem is None:
        if resume:
            print(f"note: no unfinished run in {folder.folder}; starting a new one", file=sys.stderr)
        stem = folder.claim(name, settings)
    stem = share(stem)
    progress = f"{stem}.progress.rank{rank}.jsonl"
    progress_lock = lock(progress)  # one writer per progress log
    if os.path.getsize(progress) == 0:
        append_jsonl(progress, {"config": settings})
    return stem, progress, progress_lock


def progress_paths(stem: str) -> list[str]:
    """Every rank's progress log of run ``stem``."""
    return sorted(glob.glob(glob.escape(stem) + ".progress*.jsonl"))


def load_progress(stem: str) -> tuple[dict[tuple[int, int], PromptRecord], dict[tuple[int, tuple], C1BatchRecord]]:
    """Finished prompts {(K, prompt_index): record} and c1 batches {(K, prompt indices): record} of run ``stem``,
    read from every rank's progress log."""
    done, batches = {}, {}
    for path in progress_paths(stem):
        for number, record in enumerate(read_complete_jsonl(path), 1):
            if PromptRecord.holds(record):
                prompt = PromptRecord.from_json(record, f"{path}: line {number}")
                done[(prompt.K, prompt.prompt_index)] = prompt
            elif C1BatchRecord.holds(record):  # keyed by its prompts: the batch layout depends on the number of ranks
                batch = C1BatchRecord.from_json(record, f"{path}: line {number}")
                batches[(batch.K, tuple(batch.prompt_indices))] = batch
    return done, batches
