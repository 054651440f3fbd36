"""torchrun support: rank/world from the environment, prompt sharding (``Shards``: a run's c1 batches over its
ranks), barriers (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from grpo_mse.cli import launch_env
from grpo_mse.errors import UsageError

# Collective timeout (NCCL's watchdog default is 10 minutes): ranks meet at a barrier after each K and wait there
# for the slowest shard, which at 1.5B can be tens of minutes behind. GRPO_DIST_TIMEOUT_MIN overrides it.
TIMEOUT_MINUTES = 180


def timeout() -> datetime.timedelta:
    text = os.environ.get("GRPO_DIST_TIMEOUT_MIN", str(TIMEOUT_MINUTES))
    try:
        minutes = float(text)
    except ValueError:
        minutes = float("nan")
    if not 0 < minutes < float("inf"):
        raise UsageError(f"GRPO_DIST_TIMEOUT_MIN={text} must be a positive number of minutes")
    return datetime.timedelta(minutes=minutes)


def init_from_env(device: str) -> tuple[int, int, str]:
    """(rank, world size, device for this rank); initialises a process group under torchrun (NCCL bound to
    this rank's GPU with ``device_id``, a long ``timeout``)."""
    world, rank, local = launch_env()
    if world == 1:
        return 0, 1, device
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        if device.startswith("cuda"):
            dist.init_process_group("nccl", timeout=timeout(), device_id=torch.device(device))
        else:
            dist.init_process_group("gloo", timeout=timeout())
    return rank, world, device


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def broadcast_text(text: str) -> str:
    """Rank 0's ``text`` on every rank (used for the shared run timestamp)."""
    if not (dist.is_available() and dist.is_initialized()):
        return text
    box = [text]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def finish() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard(indices: list[int], rank: int, world: int) -> list[int]:
    """Every world-th index starting at rank: balanced, deterministic."""
    return indices[rank::world]


def rank_batches(count: int, size: int, world: int) -> list[list[list[int]]]:
    """Per rank, its c1 batches: rank r takes the r-th of ``world`` contiguous ranges of prompts whose lengths
    differ by at most one (shards balanced by prompt), cut into batches of ``size`` consecutive prompts (a
    range's last batch may be shorter). A batch never crosses ranks, so its Gram matrix is computed where its
    prompts are; with one process: consecutive prompts in batches of ``size``."""
    per, extra = divmod(count, world)
    layout, start = [], 0
    for rank in range(world):
        stop = start + per + (rank < extra)
        layout.append([list(range(first, min(first + size, stop))) for first in range(start, stop, size)])
        start = stop
    return layout


@dataclass(frozen=True)
class Shards:
    """A run's ``count`` prompts over its ranks: every rank's batches (``rank_batches``) numbered in rank order,
    ``batches[b]`` the prompts of batch b, and ``mine`` the ids of this rank's batches."""

    batches: list[list[int]]
    mine: list[int]

    @classmethod
    def of(cls, count: int, size: int, rank: int, world: int) -> Shards:
        layout = rank_batches(count, size, world)
        first = sum(len(batches) for batches in layout[:rank])
        return cls([batch for batches in layout for batch in batches], list(range(first, first + len(layout[rank]))))

    def largest(self) -> int:
        """The most prompts in one batch (of any rank)."""
        return max(len(batch) for batch in self.batches)

    def my_prompts(self) -> int:
        """How many prompts this rank evaluates."""
        return sum(len(self.batches[b]) for b in self.mine)
