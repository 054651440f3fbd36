"""One run-folder helper for the oracle and tracecov runs: claim a unique run name, save and read its settings,
find the newest unfinished run with equal settings, lock a file for one writer; and the tracecov run's resume
(``open_progress``, ``load_progress``): its ranks' progress logs, where each finished record is appended at once.

A run is a stem ``{folder}/{name}_{timestamp}[_n]`` claimed by creating ``stem + marker`` exclusively. Its
settings live in ``stem.settings.json`` (oracle) or on the first line of the marker file as ``{"config": ...}``
(tracecov's rank-0 progress log); resuming needs equal values on the run's result fields.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass

from grpo_mse import distributed
from grpo_mse.tables.outputs import append_jsonl, read_complete_jsonl, timestamp, write_json
from grpo_mse.tables.records import C1BatchRecord, PromptRecord
from grpo_mse.tables.resume import choose, claim, lock

__all__ = ["RunFolder", "load_progress", "lock", "open_progress", "progress_paths"]


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


def open_progress(folder: RunFolder, name: str, settings: dict, resume: bool, rank: int) -> tuple[str, str, object]:
    """(the run's stem, this rank's progress log ``{stem}.progress.rank{rank}.jsonl``, its lock held until the
    run ends): rank 0 takes the newest unfinished run with equal ``settings`` (``resume``) or claims a fresh one
    named ``name``, and every rank gets its stem; a new log starts with ``{"config": settings}``."""
    stem = folder.resumable(settings) if resume and rank == 0 else None
    if rank == 0 and stem is None:
        if resume:
            print(f"note: no unfinished run in {folder.folder}; starting a new one", file=sys.stderr)
        stem = folder.claim(name, settings)
    stem = distributed.broadcast_text(stem)
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
