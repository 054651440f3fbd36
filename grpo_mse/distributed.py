"""torchrun support: rank/world from the environment, prompt sharding, barriers (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from grpo_mse.cli import UsageError, launch_env

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
