"""Trace of the sample covariance of vectors given as lists of tensors (one per model parameter).

tr Cov = sum_i Var(x_i) = sum_m ||x_m - mean||^2 / (M - 1)  (denominator M-1).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from grpo_mse.gradients import memory
from grpo_mse.gradients.memory import (
    C1_HOST_BYTES,
    PARTIAL_GRAM_MIN,
    cpu_block_coordinates,
    stats_dtype,
)

# Coordinates per float64 block of a Gram matrix (``block_coordinates``): on CUDA at least 2^24 (a few
# dozen blocks at 0.5B, each one large matrix product: launch overhead vanishes). On the CPU vectors of at most
# CPU_MIN_BLOCK coordinates are one block (the built-in policies: their results keep their bits); longer ones go
# in cache-sized blocks (``memory.cpu_block_coordinates``, which c1_memory counts too).
CUDA_BLOCK = 1 << 24
CPU_MIN_BLOCK = 1 << 20


def block_coordinates(count: int, device: torch.device | str, total: int | None = None) -> int:
    """Coordinates per float64 block for a Gram matrix of ``count`` vectors of ``total`` coordinates (None: long
    vectors) on ``device``."""
    if torch.device(device).type == "cuda":
        return CUDA_BLOCK
    if total is not None and total <= CPU_MIN_BLOCK:
        return CPU_MIN_BLOCK
    return cpu_block_coordinates(count)


def block_plan(sizes: list[int], coordinates: int) -> list[list[tuple[int, int, int]]]:
    """Blocks of ``coordinates`` coordinates (the last may be smaller) over parameters of ``sizes`` in order:
    each block a list of (parameter index, start, stop) spans; a parameter is split only at a block boundary,
    so small parameters share a block and a block never holds a partial parameter it could hold whole."""
    plan, spans, room = [], [], coordinates
    for index, size in enumerate(sizes):
        start = 0
        while start < size:
            stop = min(size, start + room)
            spans.append((index, start, stop))
            room -= stop - start
            start = stop
            if room == 0:
                plan.append(spans)
                spans, room = [], coordinates
    if spans:
        plan.append(spans)
    return plan


def gram64(vectors: list[list[torch.Tensor]], block: int | None = None, rows: int | None = None) -> torch.Tensor:
    """[N, N] float64 Gram matrix <v_i, v_j> of vectors given as per-parameter tensor lists: exact float64
    products, ``block`` coordinates at a time (default ``block_coordinates``: by device), copied into one
    reused float64 buffer (no model-sized float64 copy).

    ``rows`` = R < N: only what a pass of R gradient rows and N - R running sums needs, the first R rows
    <v_r, v_j> (and their mirror) and the diagonal <v_i, v_i> of the others; their cross terms stay NaN.
    At Qwen2.5-0.5B shapes (2 rows, 3 sums) that is 2.4x less float64 matrix work than the full matrix."""
    count = len(vectors)
    rows = count if rows is None else rows
    device = vectors[0][0].device
    sizes = [t.numel() for t in vectors[0]]
    plan = block_plan(sizes, block or block_coordinates(count, device, sum(sizes)))
    gram = torch.zeros((count, count), dtype=torch.float64, device=device)
    if not plan:
        return gram
    width = max(sum(stop - start for _, start, stop in spans) for spans in plan)
    buffer = torch.empty((count, width), dtype=torch.float64, device=device)
    diagonal = torch.zeros(count - rows, dtype=torch.float64, device=device)
    for spans in plan:
        filled = 0
        for index, start, stop in spans:
            end = filled + stop - start
            for row, vector in enumerate(vectors):
                buffer[row, filled:end].copy_(vector[index].reshape(-1)[start:stop])
            filled = end
        values = buffer[:, :filled]
        if rows == count:
            gram.addmm_(values, values.T)
            continue
        gram[:rows].addmm_(values[:rows], values.T)
        for other in range(rows, count):
            diagonal[other - rows] += torch.dot(values[other], values[other])
    if rows < count:
        gram[rows:, :rows] = gram[:rows, rows:].T
        gram[rows:, rows:] = float("nan")
        others = torch.arange(rows, count, device=device)
        gram[others, others] = diagonal
    return gram


def dot64(left: list[torch.Tensor], right: list[torch.Tensor], block: int | None = None) -> float:
    """<left, right> in float64."""
    return float(gram64([left, right], block)[0, 1])


def model_sized(shapes_like: list[torch.Tensor]) -> bool:
    """Whether vectors shaped like ``shapes_like`` are model-sized (>= PARTIAL_GRAM_MIN coordinates): the fast engine's
    partial Gram matrices, kept rows and <T, T>-based squares are for those (the built-in policies keep their bits)."""
    return sum(p.numel() for p in shapes_like) >= PARTIAL_GRAM_MIN


class Accumulator:
    """What an engine's statistics of one label offer the run (``gradients.trace_engines``' interface): ``count``
    vectors added, ``trace()`` and ``mean()``; the other methods have defaults an engine may override."""

    count: int

    def trace(self) -> float:
        """Trace of the sample covariance of the vectors (denominator count - 1)."""
        raise NotImplementedError

    def mean(self) -> list[torch.Tensor]:
        """Their mean, one tensor per parameter."""
        raise NotImplementedError

    def mean_square(self) -> float:
        """||mean||^2 in float64."""
        mean = self.mean()
        return dot64(mean, mean)

    def kept_mean(self, alone: bool) -> tuple[list[torch.Tensor], float]:
        """(vector, scale), the vector times the scale being the mean, for a keeper that owns the vector from now on
        (the advisor's c1 batch; nothing else reads this accumulator's mean afterwards). ``alone``: no other
        accumulator of the prompt is read afterwards either. Default: the mean itself, scale 1."""
        return self.mean(), 1.0

    def release(self) -> None:
        """Hand buffers taken from the run's pool back to it (the accumulator's vectors are gone afterwards)."""

    def blocks(self) -> list[tuple[float, float]] | None:
        """An engine that makes several independent unbiased estimates of every statistic (the sketched engine's
        blocks): each one's (trace, ||mean||^2). Default None: one exact computation."""
        return None


def _ends(tensors: list[torch.Tensor]) -> list[int]:
    """Each tensor's end offset in a flat concatenation of ``tensors``."""
    ends, offset = [], 0
    for t in tensors:
        offset += t.numel()
        ends.append(offset)
    return ends


class BufferPool:
    """Flat tensors handed back by finished running sums (``SumTrace.release``), handed out again to new ones: a
    run's prompts reuse the same model-sized buffers instead of allocating (page-faulting) fresh ones each time."""

    def __init__(self):
        self.free: dict[tuple, list[torch.Tensor]] = {}

    def take(self, numel: int, dtype: torch.dtype, device) -> torch.Tensor:
        """A flat tensor of ``numel`` elements with undefined values."""
        free = self.free.get((numel, dtype, torch.device(device)))
        return free.pop() if free else torch.empty(numel, dtype=dtype, device=device)

    def give(self, flat: torch.Tensor) -> None:
        self.free.setdefault((flat.numel(), flat.dtype, flat.device), []).append(flat)


class SumTrace(Accumulator):
    """Low memory: one fp32 running sum T per parameter and a float64 M2 = sum_m ||x_m - mean||^2.

    Vectors arrive a pass at a time as x_g = sum_r C[g, r] v_r. A pass's own M2 comes from float64 Gram
    scalars of the v_r (no rounded sum involved); it is merged with the earlier passes by Chan et al.'s
    rule M2 = M2_A + M2_P + n_A n_P / (n_A + n_P) ||T / n_A - S / n_P||^2, so identical vectors give 0.
    """

    def __init__(self, shapes_like: list[torch.Tensor], pool: BufferPool | None = None):
        self.count = 0
        self.m2 = 0.0
        self.shapes_like = shapes_like
        self.sums: list[torch.Tensor] | None = None  # T, allocated by the first nonzero addition (no zero fill)
        self.pool, self.flat = pool, None  # with a pool, T is views of one flat tensor taken from it
        # a first pass added with ``defer``: T as (coefficient, row) terms, formed only if asked for, and <T, T>
        self.terms: list[tuple[float, list[torch.Tensor]]] | None = None
        self.total_sq: float | None = None

    def _pooled(self) -> list[torch.Tensor] | None:
        """Views of a flat tensor from the pool shaped like T (None without a pool or for mixed dtypes)."""
        dtypes = {stats_dtype(p) for p in self.shapes_like}
        if self.pool is None or len(dtypes) != 1 or not self.shapes_like:
            return None
        total = sum(p.numel() for p in self.shapes_like)
        self.flat = self.pool.take(total, dtypes.pop(), self.shapes_like[0].device)
        views, offset = [], 0
        for p in self.shapes_like:
            views.append(self.flat[offset : offset + p.numel()].view(p.shape))
            offset += p.numel()
        return views

    @property
    def held(self) -> bool:
        """Whether T may be nonzero: formed, or deferred as terms."""
        return self.sums is not None or self.terms is not None

    def square(self) -> float:
        """<T, T> in float64: the deferred pass's exact scalar, 0 for a T never added to, else from T itself."""
        if self.terms is not None:
            return self.total_sq
        return 0.0 if self.sums is None else float(gram64([self.sums])[0, 0])

    def materialize(self, in_place: bool = False) -> None:
        """Form a deferred T from its terms, by the additions an undeferred pass makes (the same bits).

        ``in_place``: T is formed in its first term's row (scaled, then the others added), not in a new
        model-sized buffer; only for a caller that reads no other sum made of these rows afterwards."""
        if self.terms is None:
            return
        terms, self.terms, self.total_sq = self.terms, None, None
        first_c, first = terms[0]
        if in_place and self.sums is None and all(v.dtype == stats_dtype(p) for v, p in zip(first, self.shapes_like)):
            self.sums = [torch.mul(v, first_c, out=v) for v in first]
            terms = terms[1:]
        for c, vector in terms:
            self.accumulate(vector, c)

    def hand_over(self) -> list[torch.Tensor]:
        """T itself, for a new owner (a c1 batch, which gives its flat buffer back to the pool); T is gone here."""
        self.materialize()
        sums = self.sums
        self.sums, self.flat = None, None
        return sums

    def release(self) -> None:
        """Hand T's buffer back to the pool; T is gone (the scalars count and m2 stay)."""
        if self.flat is not None:
            self.pool.give(self.flat)
        self.sums, self.flat, self.terms, self.total_sq = None, None, None, None

    @property
    def total(self) -> list[torch.Tensor]:
        """The running sum T (zeros until something nonzero was added)."""
        self.materialize()
        if self.sums is None:
            pooled = self._pooled()
            if pooled is not None:
                self.sums = [t.zero_() for t in pooled]
            else:
                self.sums = [torch.zeros_like(p, dtype=stats_dtype(p)) for p in self.shapes_like]
        return self.sums

    def accumulate(self, vector: list[torch.Tensor], c: float) -> None:
        """T += c vector; the first time T = c vector, written once (model-sized zero fills cost seconds at 0.5B)."""
        self.materialize()
        if self.sums is None:
            pooled = self._pooled()
            if pooled is not None:
                self.sums = [torch.mul(v.to(t.dtype), c, out=t) for v, t in zip(vector, pooled)]
            else:
                self.sums = [torch.mul(v.to(stats_dtype(p)), c) for v, p in zip(vector, self.shapes_like)]
            return
        if vector[0].dtype != self.sums[0].dtype:  # one parameter upcast at a time, not a whole fp32 copy of a row
            for t, v in zip(self.sums, vector):
                t.add_(v.to(t.dtype), alpha=c)
            return
        torch._foreach_add_(self.sums, vector, alpha=c)

    def add_pass(
        self,
        coefficients: torch.Tensor,
        rows: list[list[torch.Tensor]],
        gram: torch.Tensor,
        total_dots: torch.Tensor,
        total_sq: float,
        defer: bool = False,
    ) -> None:
        """Add x_g = sum_r coefficients[g, r] rows[r] for every g, given gram = <v_r, v_s>,
        total_dots = <T, v_r> and total_sq = <T, T> (all float64).

        ``defer`` (a first pass only): T is kept as its terms and <T, T> as the float64 scalar, and formed only
        when asked for (``total``, ``mean``, ``hand_over``): a prompt whose one pass holds all its groups forms
        only the sums something reads, each read once, instead of every sum's additions."""
        coefficients = coefficients.to(torch.float64)
        n_pass, n_before = coefficients.shape[0], self.count
        summed = coefficients.sum(0)  # S = sum_r summed[r] v_r
        sum_sq = float(summed @ gram @ summed) if len(summed) else 0.0
        within = float(torch.einsum("gr,rs,gs->", coefficients, gram, coefficients)) - sum_sq / n_pass
        if n_before:
            cross = float(summed @ total_dots) if len(summed) else 0.0
            gap = total_sq / n_before**2 - 2 * cross / (n_before * n_pass) + sum_sq / n_pass**2
            within += gap * n_before * n_pass / (n_before + n_pass)
        self.m2 += within
        self.count += n_pass
        if defer and not n_before:
            terms = [(c, vector) for c, vector in zip(summed.tolist(), rows) if c != 0.0]
            # every coefficient 0 (a prompt whose rewards all equal its V: the oracle's x_g are all 0): T stays
            # unformed, that is zero, as an undeferred pass that adds nothing leaves it
            self.terms, self.total_sq = (terms, sum_sq) if terms else (None, None)
            return
        for c, vector in zip(summed.tolist(), rows):
            if c != 0.0:
                self.accumulate(vector, c)

    def update(self, vector: list[torch.Tensor]) -> None:
        """Add one vector x."""
        gram = gram64([vector, self.total])
        self.add_pass(torch.ones((1, 1), dtype=torch.float64), [vector], gram[:1, :1], gram[1, :1], float(gram[1, 1]))

    def trace(self) -> float:
        """M2 / (n - 1)."""
        if self.count < 2:
            raise ValueError("trace of covariance needs at least 2 samples")
        return self.m2 / (self.count - 1)

    def mean(self) -> list[torch.Tensor]:
        """T / n as new tensors; with a pool, views of one flat tensor taken from it (the same values)."""
        self.materialize()
        if self.flat is not None:
            flat = torch.div(
                self.flat, self.count, out=self.pool.take(self.flat.numel(), self.flat.dtype, self.flat.device)
            )
            return [flat[offset - t.numel() : offset].view(t.shape) for t, offset in zip(self.sums, _ends(self.sums))]
        return [t / self.count for t in self.total]

    def mean_square(self) -> float:
        """||T / n||^2: for model-sized vectors (or a deferred T) <T, T> / n^2 in float64, with no model-sized mean
        allocated and only one vector copied to float64; otherwise from the mean."""
        if self.terms is not None or model_sized(self.shapes_like):
            return self.square() / self.count**2
        return super().mean_square()

    def kept_mean(self, alone: bool) -> tuple[list[torch.Tensor], float]:
        """A model-sized T that is pooled (or ``alone``) is handed over as it is, with scale 1 / n (the keeper scales
        its Gram entries instead of computing T / n: one model-sized pass less); otherwise the mean, scale 1 (the
        built-in policies' results keep their bits). A deferred T (kept rows) is formed here, once; in its own rows
        when ``alone`` (they are released right after): one model-sized buffer less at the prompt's peak."""
        if self.count:
            self.materialize(in_place=alone)
            if self.sums is not None and model_sized(self.sums) and (self.flat is not None or alone):
                return self.hand_over(), 1.0 / self.count
        return self.mean(), 1.0


def spill_to_file(vector: list[torch.Tensor], path: str) -> list[torch.Tensor]:
    """Write ``vector`` (per-parameter tensors, any device) to the raw file ``path`` a chunk at a time and return
    per-parameter CPU tensors of the same values memory-mapped from it (no host copy of the whole vector)."""
    dtype = vector[0].dtype
    with open(path, "wb") as f:
        for tensor in vector:
            flat = tensor.detach().reshape(-1)
            for start in range(0, flat.numel(), memory.SPILL_CHUNK):  # the chunk c1_memory plans for
                f.write(flat[start : start + memory.SPILL_CHUNK].to("cpu").contiguous().view(torch.uint8).numpy())
    total = sum(t.numel() for t in vector)
    flat = torch.from_file(path, shared=False, size=total, dtype=dtype) if total else torch.zeros(0, dtype=dtype)
    views, offset = [], 0
    for tensor in vector:
        views.append(flat[offset : offset + tensor.numel()].view(tensor.shape))
        offset += tensor.numel()
    return views


class BetweenPromptBatch:
    """One batch of prompts for c1: their mean gradients' Gram matrix and within-prompt variances tr_oracle / M.

    The batch's mean gradients are held until ``result`` (``--c1_batch`` x trainable parameters x 4 bytes for
    float32 statistics: 99 GB at Qwen2.5-1.5B). With ``spill`` (a path prefix in the run folder), those beyond
    ``host_bytes`` in host memory go to files ``{spill}.{j}.bin`` instead (exact copies, memory-mapped back and
    removed by ``result``), so the Gram matrix, computed in float64 by ``gram64``, is bit-identical."""

    def __init__(self, spill: str | None = None, host_bytes: int = C1_HOST_BYTES, pool: BufferPool | None = None):
        self.means, self.within, self.prompt_indices = [], [], []
        self.spill, self.host_bytes, self.kept_bytes, self.files = spill, host_bytes, 0, []
        self.pool, self.pooled = pool, []  # owned means that are views of a flat pool tensor: given back by discard
        self.scales = []  # mean gradient i is scales[i] x means[i]

    def add(
        self,
        mean_gradient,
        trace_of_group_estimate: float,
        m: int,
        prompt_index: int | None = None,
        owned: bool = False,
        scale: float = 1.0,
    ) -> None:
        """Hold one prompt's mean gradient, ``scale`` times ``mean_gradient`` (``result`` scales its Gram entries):
        a copy, or with ``owned`` (a tensor list nothing else writes to, such as a fresh ``SumTrace.mean()``) the
        CPU tensors themselves (no second model-sized copy)."""
        self.scales.append(float(scale))
        size = sum(t.numel() * t.element_size() for t in mean_gradient)
        if self.spill is not None and self.kept_bytes + size > self.host_bytes:
            self.files.append(f"{self.spill}.{len(self.means)}.bin")
            self.means.append(spill_to_file(mean_gradient, self.files[-1]))
        else:
            self.kept_bytes += size
            self.means.append([t.detach().to("cpu", copy=not owned) for t in mean_gradient])
            base = mean_gradient[0]._base if owned and mean_gradient else None
            if self.pool is not None and base is not None and base.numel() == sum(t.numel() for t in mean_gradient):
                self.pooled.append(base)  # a SumTrace.mean() from the pool
        self.within.append(trace_of_group_estimate / m)
        self.prompt_indices.append(len(self.means) - 1 if prompt_index is None else prompt_index)

    def result(self) -> dict:
        """{"n", "prompt_indices", "gram", "within_each", "between", "within", "c1"} (needs two prompts).

        between = sum_i ||g_i - mean g||^2 / (n - 1); c1 = between - mean(tr_oracle / M)."""
        gram = gram64(self.means).cpu().numpy()
        if any(scale != 1.0 for scale in self.scales):
            scales = np.array(self.scales)
            gram = gram * np.outer(scales, scales)
        self.discard()
        n = len(gram)
        between = float(np.trace(gram) - gram.sum() / n) / (n - 1)
        within = float(np.mean(self.within))
        return {
            "n": n,
            "prompt_indices": list(self.prompt_indices),
            "gram": gram.tolist(),
            "within_each": list(self.within),
            "between": between,
            "within": within,
            "c1": between - within,
        }

    def discard(self) -> None:
        """Drop the mean gradients (pooled ones go back to the pool) and remove their files."""
        self.means, self.kept_bytes, self.scales = [], 0, []
        for flat in self.pooled:
            self.pool.give(flat)
        self.pooled = []
        for path in self.files:
            if os.path.exists(path):
                os.remove(path)
        self.files = []
