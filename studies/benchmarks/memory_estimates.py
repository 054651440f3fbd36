"""The benchmarks' memory estimates, made before any work: the peak bytes of one engine's statistics and gradients
(checked against measured peaks by tests/studies/test_memory_estimates.py), a model's weights, and the one-line
refusal when an estimate exceeds what the device has; and the bytes an engine's statistics hold once built. A
tracecov run plans its own memory (grpo_mse.gradients.memory_plan)."""

from __future__ import annotations

from grpo_mse.errors import UsageError
from grpo_mse.gradients import memory

CUDA_BLOCK_COORDINATES = 1 << 24  # at least this many float64 coordinates per block on CUDA


def engine_bytes(params, engine: str, labels: int, rows: int = 2, device: str = "cpu", kept: int = 0) -> int:
    """Peak bytes of one engine's statistics and gradients for ``params`` (not counting the model itself), with
    ``kept`` more gradient rows held for the statistics (``kept_rows``)."""

    count = sum(p.numel() for p in params)
    if not count:
        return 0
    model = memory.element_bytes(params[0].dtype)
    stats = memory.element_bytes(memory.stats_dtype(params[0]))
    largest = max(p.numel() for p in params)
    if engine == "reference":
        return 2 * labels * count * stats + count * model + 4 * largest * stats
    vectors = rows + labels
    blocks = memory.CPU_BLOCK_BYTES if str(device) == "cpu" else vectors * CUDA_BLOCK_COORDINATES * 8
    # the gradient rows twice: a batched backward's intermediate per-parameter gradients are as large as the
    # rows it returns, and both are alive at its end (measured: tests/gpu/test_gpu_check.py); before the float64
    # Gram blocks became cache-sized, a 128 MiB block term happened to cover them
    return labels * count * stats + (2 * rows + kept) * count * model + min(blocks, vectors * count * 8)


def model_bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def require_fits(needed: int, device: str, what: str, available: int | None = None) -> str:
    """The estimate as one line; UsageError (one line) when ``needed`` bytes exceed what ``device`` has."""
    have, kind = memory.device_available(device) if available is None else (available, "available memory")
    line = f"{what}: about {needed / memory.GB:.3g} GB needed, {have / memory.GB:.3g} GB {kind}"
    if needed > have:
        raise UsageError(line + "; too little memory: use smaller shapes, fewer repeats or a larger machine")
    return line


def statistics_bytes(accumulator) -> int:
    """Bytes one estimator's statistics hold: a WelfordTrace's running mean and M2, or a SumTrace's running sums
    (in the statistics dtype, whether allocated yet or not)."""
    from grpo_mse.gradients.trace_engines.reference import WelfordTrace

    if isinstance(accumulator, WelfordTrace):
        return sum(t.numel() * t.element_size() for t in accumulator.running_mean + accumulator.m2)
    return sum(p.numel() * memory.element_bytes(memory.stats_dtype(p)) for p in accumulator.shapes_like)
