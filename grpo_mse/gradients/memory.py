"""What the gradient engines and the c1 batches hold, and what the machine has: how many groups share a pass
(``groups_per_pass``), when a pass's Gram matrix skips the running sums' cross terms (``PARTIAL_GRAM_MIN``), the
bytes of a model element and of a statistics element, a c1 batch's memory and disk (``c1_memory``,
``c1_batch_that_fits``), the host's and a device's available memory.

With P trainable coordinates, b bytes per model element and 4 (8 for a float64 model) per statistics element:
model P b; reference engine 2 L P 4 (Welford mean and M2 per label) + P b (one gradient) + 4 x the largest
tensor in fp32 (Welford's temporaries); fast engine L P 4 (one running sum per label) + R P b (R gradient rows
per pass) + its float64 blocks. L = labels (estimators and their helpers), R = 2 x groups per pass. A tracecov
run's whole plan is ``memory_plan.py``; the process's allocator and resident memory ``allocator.py``.
Importing this module is cheap (torch is used only through the tensors handed in).
"""

from __future__ import annotations

import os

GB = 1e9


C1_HOST_BYTES = 8 << 30  # mean gradients a c1 batch keeps in host memory per rank; the rest go to a file
SPILL_CHUNK = 1 << 24  # elements copied to the host at a time when a mean gradient is written to its file


# Coordinates from which a pass's Gram matrix skips the running sums' cross terms (gram64's ``rows``): only at
# model sizes does the thin float64 product cost seconds (Qwen2.5-0.5B: x2.4 less work); smaller models keep the
# full product and the bits of their committed results.
PARTIAL_GRAM_MIN = 1 << 20


# gram64's float64 blocks on the CPU for long vectors: one CPU_BLOCK_BYTES buffer for all the vectors (at least
# CPU_SMALLEST_BLOCK coordinates each): the float64 copy stays in cache for the product (SmolLM2-135M, 7 vectors,
# 1 thread: 0.67 s a Gram matrix with 64K-coordinate blocks, 1.27 s with the former 128 MiB buffer, which was also
# a fresh allocation per call).
CPU_BLOCK_BYTES = 1 << 22
CPU_SMALLEST_BLOCK = 1 << 14


def cpu_block_coordinates(count: int) -> int:
    """Coordinates per float64 block of the Gram matrix of ``count`` long vectors on the CPU
    (``statistics.block_coordinates``)."""
    return max(CPU_SMALLEST_BLOCK, CPU_BLOCK_BYTES // (8 * max(count, 1)))


def groups_per_pass(k: int, n_params: int, requested: int = 0, memory_bytes: float = 2**31) -> int:
    """Groups whose gradients share one forward and one batched backward call.

    ``requested`` > 0 is used as is; 0 (auto) packs up to 128 sequences per call (at most 64 groups),
    within ``memory_bytes`` for the 2 fp32 gradient vectors per group.
    """
    if requested > 0:
        return requested
    by_memory = int(memory_bytes // (2 * 4 * max(n_params, 1)))
    return max(1, min(64, 128 // k, by_memory))


def element_bytes(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype, device="meta").element_size()


def stats_dtype(like):
    """Statistics in float32, or float64 for a float64 model (bf16/fp16 gradients are upcast)."""
    import torch

    return torch.promote_types(like.dtype, torch.float32)


def host_available() -> int:
    """Bytes of host memory available now (MemAvailable; the physical total where /proc is missing)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_available(device: str) -> tuple[int, str]:
    """(bytes available, what they are) on ``device``: free GPU memory on CUDA, else available host memory."""
    if str(device).startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free), f"free memory on {device}"
    return host_available(), "available host memory"


def c1_batch_that_fits(params, requested: int, disk_free: int, host_free: int, margin: float = 0.1) -> int | None:
    """The largest c1 batch in 2..``requested`` whose files fit ``disk_free`` and whose host part fits
    ``host_free``, each with ``margin`` of it kept free (``c1_memory``); None when none does."""
    for batch in range(requested, 1, -1):
        plan = c1_memory(params, batch, C1_HOST_BYTES)
        if plan["disk_bytes"] <= disk_free * (1 - margin) and plan["host_bytes"] <= host_free * (1 - margin):
            return batch
    return None


def c1_memory(params, batch_size: int, host_bytes: int = C1_HOST_BYTES) -> dict:
    """What ``BetweenPromptBatch(spill=..., host_bytes=host_bytes)`` holds at its peak (just before ``result``)
    for ``batch_size`` mean gradients shaped like ``params`` (statistics dtype; meta tensors are fine):
    {"vector_bytes", "in_memory", "on_disk", "host_bytes", "disk_bytes"}. host_bytes counts the copies kept in
    memory, the chunk copied while one is written to its file and ``gram64``'s float64 working blocks; the
    file's pages read back by ``gram64`` are page cache (clean, reclaimable), not counted."""
    each = sum(p.numel() * element_bytes(stats_dtype(p)) for p in params)
    kept = batch_size if each == 0 else min(batch_size, host_bytes // each)
    spilled = batch_size - kept
    block = cpu_block_coordinates(batch_size)  # gram64's block for long vectors on the host
    chunk = max((min(p.numel(), SPILL_CHUNK) * element_bytes(stats_dtype(p)) for p in params), default=0)
    work = 2 * batch_size * block * 8 + (chunk if spilled else 0)
    return {
        "vector_bytes": each,
        "in_memory": kept,
        "on_disk": spilled,
        "host_bytes": kept * each + work,
        "disk_bytes": spilled * each,
    }
