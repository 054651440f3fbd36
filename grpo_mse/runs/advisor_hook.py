"""The group-size advisor observing a tracecov run (``AdvisorHook``), loaded only when the advisor is on.

The run tells it where each c1 batch starts (``batch_started``), hands it each finished prompt (``prompt_done``)
and asks for the batch's record at its end (``batch_done``); at the end of the run it turns the prompts' records
and the batches' records into the advice (``advice``), from the run's own bootstrap replicates. Everything about
c1 (its batches' mean gradients, their files, their memory and disk checks) and std-GRPO's measured curve lives
here; the run itself holds none of it.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass, field

import numpy as np

from grpo_mse.analysis.advisor import GroupSizeAdvice, run_advice
from grpo_mse.analysis.bootstrap import read_calibration
from grpo_mse.analysis.error_model import BIAS_GRAM
from grpo_mse.config.gradient_evaluation import TracecovConfig
from grpo_mse.errors import UsageError
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients import memory
from grpo_mse.gradients.engine import PromptStats, own_label
from grpo_mse.gradients.estimators import ORACLE
from grpo_mse.gradients.statistics import BetweenPromptBatch, BufferPool
from grpo_mse.tables.records import C1BatchRecord, PromptRecord

C1_FILES = ("c1", "c1std", "c1stdbias")  # spill-file labels of the oracle's, std-GRPO's and its bias' mean gradients
C1_GRAMS = (est.GRPO_STD, BIAS_GRAM)  # estimator_grams keys of the second and third copies


@dataclass
class AdvisorHook:
    """The advisor's side of a tracecov run: its c1 batches (``batches``: {(K, prompt indices): C1BatchRecord},
    the finished ones, from the progress log on resume) and the batch in flight (``open``: one
    ``BetweenPromptBatch`` per mean gradient kept per prompt, ``config.c1_copies``)."""

    config: TracecovConfig
    layout: list[list[int]]  # every rank's batches of prompt positions (``distributed.Shards.batches``)
    base: str = ""  # the run's stem: spilled mean gradients go to {base}.{label}.rank{rank}.{j}.bin
    rank: int = 0
    host_bytes: int | None = None  # the memory plan's c1 share, shared by the copies (None: memory.C1_HOST_BYTES)
    pool: BufferPool | None = None
    batches: dict = field(default_factory=dict)
    open: list[BetweenPromptBatch] = field(default_factory=list)

    @staticmethod
    def check(trainable, config: TracecovConfig, rows: int) -> None:
        """Before any file is written: a c1 batch's spilled mean gradients must fit the free disk."""
        if min(config.c1_batch, rows) >= 2:
            check_c1_disk(trainable, config, min(config.c1_batch, rows))

    def memory_line(self, trainable) -> str | None:
        """The host memory and disk of this run's largest c1 batch (None when no batch has two prompts)."""
        largest = max(map(len, self.layout), default=0)
        host = memory.C1_HOST_BYTES if self.host_bytes is None else self.host_bytes
        return c1_memory_line(trainable, self.config, self.base, largest, host) if largest >= 2 else None

    def batch_started(self, k: int, indices: list[int]) -> bool:
        """Open a c1 batch for ``indices`` at K unless its record is saved; True when it is open, and then every
        prompt of the batch must be handed over (an unfinished batch is evaluated whole on resume; results are
        deterministic per prompt, so nothing is duplicated in the outputs)."""
        saved = self.batches.get((k, tuple(indices)))
        copies = self.config.c1_copies
        if len(indices) < 2 or (saved is not None and (copies == 1 or saved.estimator_grams is not None)):
            return False
        # mean gradients beyond the plan's c1 share of memory (shared by the copies) go to files in the run folder
        spills = [f"{self.base}.{label}.rank{self.rank}" if self.base else None for label in C1_FILES[:copies]]
        host = (memory.C1_HOST_BYTES if self.host_bytes is None else self.host_bytes) // copies
        self.open = [BetweenPromptBatch(spill, host, self.pool) for spill in spills]
        return True

    def prompt_done(self, index: int, record: PromptRecord, stats: PromptStats) -> None:
        """Keep the prompt's mean gradients for the open batch (before ``stats`` is released)."""
        for batch, (vector, trace, scale) in zip(self.open, c1_vectors(stats, record)):
            batch.add(vector, trace, self.config.M, index, owned=True, scale=scale)

    def batch_done(self, batch_id: int, k: int, indices: list[int]) -> C1BatchRecord:
        """The open batch's record (with copies > 1 also std-GRPO's mean gradients and their difference from
        its own target), kept in ``batches``."""
        results = [batch.result() for batch in self.open]
        entry = C1BatchRecord.of_results(batch_id, k, results[0], dict(zip(C1_GRAMS, results[1:])))
        self.batches[(k, tuple(indices))] = entry
        return entry

    def discard(self) -> None:
        """Drop the open batch's mean gradients and their files (an interrupted batch is evaluated whole)."""
        for batch in self.open:
            batch.discard()
        self.open = []

    def batches_by_k(self) -> dict[int, list[C1BatchRecord]]:
        """The finished batches per K, in the order of the run's batch layout."""
        keys = [tuple(batch) for batch in self.layout]
        return {k: [self.batches[(k, b)] for b in keys if (k, b) in self.batches] for k in self.config.K_list}

    def advice(self, records_by_k: dict, weights: np.ndarray) -> GroupSizeAdvice:
        """The advice from the run's records and c1 batches, with the run's bootstrap ``weights``."""
        config = self.config
        return run_advice(
            records_by_k,
            self.batches_by_k(),
            weights,
            budget=config.budget,
            allowed=config.allowed_K,
            estimator=config.advisor_estimator,
            calibration=read_calibration(),  # the committed table
        )

    @staticmethod
    def spilled_files(base: str) -> list[str]:
        """c1 files a crash left in the run folder (removed when the run closes)."""
        return [path for label in C1_FILES for path in glob.glob(f"{glob.escape(base)}.{label}.rank*.bin")]


def c1_vectors(stats: PromptStats, record: PromptRecord) -> list[tuple[list, float, float]]:
    """(vector, trace of one group's estimate, scale) for c1 and the measured curve, the vector times the scale
    being the mean gradient over the M groups: the oracle's; std-GRPO's (when traced); and x_std - x_oracle /
    sqrt(V (1 - V)), whose mean estimates std-GRPO's bias against its own target g / sqrt(V (1 - V)) (for a
    prompt with V_hat 0 or 1 the target is 0: x_std).

    An accumulator read once here gives its mean as the engine likes best (``Accumulator.kept_mean``: the fast
    engine hands a pooled model-sized running sum T over with scale 1 / n, one model-sized pass less per vector);
    one read twice gives its mean, scale 1."""
    pairs = [(stats.accumulators[ORACLE], record.tr_cov[ORACLE])]
    if est.GRPO_STD in stats.accumulators:
        own = stats.accumulators.get(own_label(est.GRPO_STD), stats.accumulators[est.GRPO_STD])
        pairs += [(stats.accumulators[est.GRPO_STD], record.tr_cov[est.GRPO_STD]), (own, own.trace())]
    out = []
    for accumulator, trace in pairs:
        once = sum(other is accumulator for other, _ in pairs) == 1
        vector, scale = accumulator.kept_mean(alone=len(pairs) == 1) if once else (accumulator.mean(), 1.0)
        out.append((vector, trace, scale))
    return out


# --- c1's memory and disk, checked before any file is written ---


def existing_parent(path: str) -> str:
    """``path`` or its nearest existing parent folder (where a new folder's files would land)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def c1_memory_line(params, config, base: str, batch: int | None = None, host_bytes: int = memory.C1_HOST_BYTES) -> str:
    """One line: host memory and disk per rank that the c1 batches' mean gradients take (``c1_memory``) for
    batches of ``batch`` prompts (the largest batch the run has; default --c1_batch), with ``host_bytes`` of them
    in memory (the run's memory plan)."""
    copies, batch = config.c1_copies, config.c1_batch if batch is None else batch
    plan, gb = memory.c1_memory(params, batch * copies, host_bytes), 1e9
    size = f"--c1_batch {config.c1_batch}" if batch == config.c1_batch else f"{batch} (the run's largest batch)"
    line = (
        f"c1 memory per rank: {plan['host_bytes'] / gb:.3g} GB host ({plan['in_memory']} of {copies} x {size} "
        f"mean gradients of {plan['vector_bytes'] / gb:.3g} GB in memory, at most {host_bytes / 1e9:.3g} GB by the "
        "memory plan)"
    )
    if plan["on_disk"]:
        line += (
            f", {plan['disk_bytes'] / gb:.3g} GB disk ({plan['on_disk']} memory-mapped in "
            f"{os.path.dirname(base) or '.'}, removed after each batch)"
        )
    return line


def check_c1_disk(params, config, batch: int) -> None:
    """UsageError (one line, before any file is written) when a c1 batch's spilled mean gradients would not fit
    the free disk under --save_json; it names the largest --c1_batch that fits."""
    copies = config.c1_copies  # mean gradients per prompt (--advisor_estimator grpo_std keeps three)
    plan = memory.c1_memory(params, batch * copies, memory.C1_HOST_BYTES)
    if not plan["disk_bytes"]:
        return
    where = existing_parent(config.save_json)
    free = shutil.disk_usage(where).free
    if plan["disk_bytes"] <= free:
        return
    fitting = (memory.c1_batch_that_fits(params, batch * copies, free, memory.host_available()) or 0) // copies
    fitting = fitting if fitting >= 2 else None
    advice = f"use --c1_batch {fitting}" if fitting else "free disk space"
    raise UsageError(
        f"--c1_batch {config.c1_batch}: c1 would write {plan['disk_bytes'] / 1e9:.3g} GB of mean gradients under "
        f"{where}, which has {free / 1e9:.3g} GB free; {advice}, or --no_advisor"
    )
