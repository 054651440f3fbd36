"""Memory a gradient-phase run needs, estimated before any work, and what the machine has.

With P trainable coordinates, b bytes per model element and 4 (8 for a float64 model) per statistics element:
model P b; reference engine 2 L P 4 (Welford mean and M2 per label) + P b (one gradient) + 4 x the largest
tensor in fp32 (Welford's temporaries); fast engine L P 4 (one running sum per label) + R P b (R gradient rows
per pass) + its float64 blocks. L = labels (estimators and their helpers), R = 2 x groups per pass.
Activations are not counted (small next to these at model sizes with short continuations).
Importing this module is cheap (torch is used only through the tensors handed in).
"""

from __future__ import annotations

import os

from grpo_mse.errors import UsageError

GB = 1e9
CPU_BLOCK_BYTES = 4 << 20  # gram64's float64 block buffer on the CPU (statistics.CPU_BLOCK_BYTES)
CUDA_BLOCK_COORDINATES = 1 << 24  # at least this many float64 coordinates per block on CUDA


# Gradient rows one prompt's statistics may hold at once (prompt_traces' keep_rows): at most KEPT_ROWS_BYTES and
# KEPT_ROWS_SHARE of the memory available at the start. SmolLM2-135M (538 MB a row) on a 24 GB machine with 17-20 GB
# available: 12-14 rows (M = 8 groups give at most 16; a group of equal rewards has one row or none).
KEPT_ROWS_BYTES = 8 << 30
KEPT_ROWS_SHARE = 0.4
C1_HOST_BYTES = 8 << 30  # mean gradients a c1 batch keeps in host memory per rank; the rest go to a file
SPILL_CHUNK = 1 << 24  # elements copied to the host at a time when a mean gradient is written to its file


def element_bytes(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype, device="meta").element_size()


def stats_dtype(like):
    """Statistics in float32, or float64 for a float64 model (bf16/fp16 gradients are upcast)."""
    import torch

    return torch.promote_types(like.dtype, torch.float32)


def kept_rows(params, available: int) -> int:
    """How many gradient rows shaped like ``params`` fit KEPT_ROWS_BYTES and KEPT_ROWS_SHARE of ``available``."""
    row = sum(p.numel() * element_bytes(p.dtype) for p in params)
    return int(min(KEPT_ROWS_BYTES, KEPT_ROWS_SHARE * available) // max(row, 1))


def engine_bytes(params, engine: str, labels: int, rows: int = 2, device: str = "cpu", kept: int = 0) -> int:
    """Peak bytes of one engine's statistics and gradients for ``params`` (not counting the model itself), with
    ``kept`` more gradient rows held for the statistics (``kept_rows``)."""

    count = sum(p.numel() for p in params)
    if not count:
        return 0
    model = element_bytes(params[0].dtype)
    stats = element_bytes(stats_dtype(params[0]))
    largest = max(p.numel() for p in params)
    if engine == "reference":
        return 2 * labels * count * stats + count * model + 4 * largest * stats
    vectors = rows + labels
    blocks = CPU_BLOCK_BYTES if str(device) == "cpu" else vectors * CUDA_BLOCK_COORDINATES * 8
    # the gradient rows twice: a batched backward's intermediate per-parameter gradients are as large as the
    # rows it returns, and both are alive at its end (measured: tests/gpu/test_gpu_check.py); before the float64
    # Gram blocks became cache-sized, a 128 MiB block term happened to cover them
    return labels * count * stats + (2 * rows + kept) * count * model + min(blocks, vectors * count * 8)


def model_bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


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


def require_fits(needed: int, device: str, what: str, available: int | None = None) -> str:
    """The estimate as one line; UsageError (one line) when ``needed`` bytes exceed what ``device`` has."""
    have, kind = device_available(device) if available is None else (available, "available memory")
    line = f"{what}: about {needed / GB:.3g} GB needed, {have / GB:.3g} GB {kind}"
    if needed > have:
        raise UsageError(line + "; too little memory: use smaller shapes, fewer repeats or a larger machine")
    return line


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
    block = max(4096, (1 << 19) // max(batch_size, 1))
    chunk = max((min(p.numel(), SPILL_CHUNK) * element_bytes(stats_dtype(p)) for p in params), default=0)
    work = 2 * batch_size * block * 8 + (chunk if spilled else 0)
    return {
        "vector_bytes": each,
        "in_memory": kept,
        "on_disk": spilled,
        "host_bytes": kept * each + work,
        "disk_bytes": spilled * each,
    }


def existing_parent(path: str) -> str:
    """``path`` or its nearest existing parent folder (where a new folder's files would land)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path
