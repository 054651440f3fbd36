"""torchrun support: rank/world from the environment, prompt sharding, barriers (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def init_from_env(device: str) -> tuple[int, int, str]:
    """(rank, world size, device for this rank); initialises a process group under torchrun."""
    from grpo_mse.cli import launch_env

    world, rank, local = launch_env()
    if world == 1:
        return 0, 1, device
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
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
