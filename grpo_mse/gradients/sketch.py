"""A seeded linear sketch of gradient vectors: d coordinates in place of n, every inner product kept unbiased.

Every statistic of the trace engines is an inner product of gradient vectors (traces, paired ratios, c1's Gram
matrix, the advisor's constants). A CountSketch S with E_S[S^T S] = I keeps each one unbiased:
E_S <S x, S y> = <x, y> for any fixed x, y.

The sketch here is R independent CountSketch blocks. Coordinate i of the flat concatenation of the parameters
(in order) gets one random sign s_i (seeded, shared by the blocks); block r has a prime modulus m_r and adds
s_i x_i into bucket i mod m_r. Unbiased because E[s_i s_j] = 0 for i != j, so only the i = j terms survive.
The sketch is the blocks side by side, each scaled by 1/sqrt(R): <S x, S y> is the mean of the R blocks' inner
products, each unbiased on its own.

Why several blocks with distinct prime moduli: two coordinates share a bucket in two blocks only if i - j is a
multiple of m_r m_q, which exceeds n at the default sizes (``SketchSpec.independent``). The blocks' errors are
then uncorrelated (a product s_i s_j s_k s_l has mean 0 unless the pairs coincide), so the spread of the R block
estimates of any statistic measures the sketch's own error: Var(mean) is estimated by var_r / R.

Why strided buckets (i mod m) rather than hashed ones: with independent signs, unbiasedness needs no random bucket
map, and i mod m is a reshape and a column sum (memory speed), where a hashed map is a scatter. Its variance,
sum_j [(sum_{i in j} x_i^2)(sum_{i in j} y_i^2) + (sum_{i in j} x_i y_i)^2 - 2 sum_{i in j} x_i^2 y_i^2] per
block (``block_variance``), is about (||x||^2 ||y||^2 + <x, y>^2) / m when every bucket gets a fair share of the
mass, which strides across all parameters give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DEFAULT_DIM = 1 << 20
DEFAULT_BLOCKS = 4
CHUNK = 1 << 22  # coordinates folded at a time: one fp32 temporary of 16 MB, never a model-sized one


def is_prime(number: int) -> bool:
    if number < 2:
        return False
    if number % 2 == 0:
        return number == 2
    return all(number % divisor for divisor in range(3, math.isqrt(number) + 1, 2))


@dataclass(frozen=True)
class SketchSpec:
    """The sketch's size and seed: ``dim`` coordinates in all, in ``blocks`` blocks (each a prime modulus at most
    dim // blocks), signs from ``seed``."""

    dim: int = DEFAULT_DIM
    blocks: int = DEFAULT_BLOCKS
    seed: int = 0

    def __post_init__(self):
        if self.blocks < 2:
            raise ValueError(f"a sketch needs at least 2 blocks to measure its own error, got {self.blocks}")
        if self.dim // self.blocks < 2:
            raise ValueError(f"sketch dimension {self.dim} is too small for {self.blocks} blocks")

    def moduli(self) -> tuple[int, ...]:
        """The ``blocks`` largest primes at most dim // blocks (distinct, so no pair of blocks shares collisions
        below their product)."""
        found, candidate = [], self.dim // self.blocks
        while len(found) < self.blocks and candidate >= 2:
            if is_prime(candidate):
                found.append(candidate)
            candidate -= 1
        if len(found) < self.blocks:
            raise ValueError(f"sketch dimension {self.dim} has too few primes below it for {self.blocks} blocks")
        return tuple(found)

    def independent(self, n: int) -> bool:
        """Whether no two coordinates of n share a bucket in two blocks (the block errors are uncorrelated): two
        coordinates share buckets mod a and mod b only if their distance, at most n - 1, is a multiple of a b."""
        moduli = self.moduli()
        return min(a * b for index, a in enumerate(moduli) for b in moduli[index + 1 :]) >= n


def fold(values: torch.Tensor, phase: int, out: torch.Tensor) -> None:
    """out[(phase + k) mod m] += values[k] for every k (m = len(out)): slices and one column sum, in the values'
    precision within a call (at most CHUNK / m + 1 terms a bucket) and in ``out``'s across calls."""
    m, n = len(out), len(values)
    head = min(n, m - phase)
    out[phase : phase + head] += values[:head]
    rest = values[head:]
    full = len(rest) // m
    if full:
        out += rest[: full * m].view(full, m).sum(0)
    tail = rest[full * m :]
    out[: len(tail)] += tail


class CountSketch:
    """The sketch of vectors shaped like ``params`` (one tensor per parameter, in order); one int8 sign per
    coordinate is the only model-sized thing it holds (n bytes).

    The signs are drawn on the CPU from ``spec.seed`` parameter by parameter, so a seed gives the same sketch on
    any device; they go to ``device`` (default: each parameter's; ``params`` may then be meta tensors)."""

    def __init__(self, spec: SketchSpec, params: list[torch.Tensor], device=None):
        self.spec, self.moduli = spec, spec.moduli()
        generator = torch.Generator().manual_seed(spec.seed)
        self.signs, self.offsets, offset = [], [], 0
        for p in params:
            signs = torch.randint(0, 2, (p.numel(),), generator=generator, dtype=torch.int8)
            self.signs.append(signs.mul_(2).sub_(1).to(p.device if device is None else device))
            self.offsets.append(offset)
            offset += p.numel()
        self.n = offset
        self.scale = 1.0 / math.sqrt(len(self.moduli))

    @property
    def dim(self) -> int:
        """Coordinates of a sketched vector (the moduli's sum, at most ``spec.dim``)."""
        return sum(self.moduli)

    def block_slices(self) -> list[slice]:
        """Each block's coordinates in a sketched vector."""
        slices, start = [], 0
        for m in self.moduli:
            slices.append(slice(start, start + m))
            start += m
        return slices

    def apply(self, vector: list[torch.Tensor]) -> torch.Tensor:
        """S x as one float64 tensor of ``dim`` coordinates (the blocks side by side, each scaled by 1/sqrt(R)),
        on the vector's device (``Folding``: a parameter at a time)."""
        folding = self.folding(vector[0].device if vector else torch.device("cpu"))
        for index, tensor in enumerate(vector):
            folding.add(index, tensor)
        return folding.result()

    def folding(self, device) -> Folding:
        """An empty sketch on ``device`` that parameters' tensors are added to one at a time, in any order."""
        return Folding(self, device)

    def block_dots(self, left: torch.Tensor, right: torch.Tensor) -> list[float]:
        """Each block's own estimate of <x, y> from two sketched vectors (their mean is <S x, S y>)."""
        blocks = len(self.moduli)
        return [blocks * float(torch.dot(left[part], right[part])) for part in self.block_slices()]


class Folding:
    """One sketch being made: each parameter's tensor is added when it is ready (``add``: a gradient as the backward
    pass produces it), so no whole gradient needs to exist. A chunk of ``CHUNK`` coordinates at a time is signed in
    a reused float32 buffer (float64 for a float64 tensor; a sign flip is exact either way) and folded into float64
    blocks: mixed int8 x float products and fresh chunk-sized tensors cost 8-10x more than in-place products (first
    touches of new memory)."""

    def __init__(self, sketch: CountSketch, device):
        self.sketch, self.device = sketch, device
        self.blocks = [torch.zeros(m, dtype=torch.float64, device=device) for m in sketch.moduli]
        self.buffers: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def _buffers(self, dtype: torch.dtype, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
        held = self.buffers.get(dtype)
        if held is None or len(held[0]) < min(CHUNK, numel):
            held = tuple(torch.empty(min(CHUNK, numel), dtype=dtype, device=self.device) for _ in range(2))
            self.buffers[dtype] = held
        return held

    def add(self, index: int, tensor: torch.Tensor) -> None:
        """Add parameter ``index``'s tensor (its coordinates' place in the flat vector is the sketch's offset)."""
        sketch, flat = self.sketch, tensor.detach().reshape(-1)
        signs, offset = sketch.signs[index], sketch.offsets[index]
        dtype = torch.promote_types(flat.dtype, torch.float32)
        signed_buffer, values_buffer = self._buffers(dtype, flat.numel())
        for start in range(0, flat.numel(), CHUNK):
            piece = flat[start : start + CHUNK]
            signed = signed_buffer[: piece.numel()].copy_(signs[start : start + CHUNK])
            if piece.dtype == dtype:
                signed.mul_(piece)
            else:  # one dtype per in-place product (a mixed one is the slow path)
                signed.mul_(values_buffer[: piece.numel()].copy_(piece))
            for out, m in zip(self.blocks, sketch.moduli):
                fold(signed, (offset + start) % m, out)

    def result(self) -> torch.Tensor:
        """The sketched vector (blocks side by side, each scaled by 1/sqrt(R))."""
        return torch.cat(self.blocks).mul_(self.sketch.scale)


def sketched_gradient(output: torch.Tensor, params: list[torch.Tensor], sketch: CountSketch, retain: bool):
    """S grad ``output`` w.r.t. ``params`` without a whole gradient ever held: one backward pass whose every
    parameter's gradient is sketched as soon as it is accumulated (a post-accumulate hook) and then dropped, so at
    most the gradients autograd itself keeps alive exist at once (on a 7B model in bf16: 15 GB less than a row).
    A parameter the output does not use adds nothing (its gradient is 0). ``params`` must hold no ``.grad``."""
    folding = sketch.folding(params[0].device)
    handles = []
    for index, param in enumerate(params):

        def sketch_and_drop(tensor, index=index):
            folding.add(index, tensor.grad)
            tensor.grad = None

        handles.append(param.register_post_accumulate_grad_hook(sketch_and_drop))
    try:
        torch.autograd.backward(output, inputs=params, retain_graph=retain)
    finally:
        for handle in handles:
            handle.remove()
    return folding.result()


def block_variance(x: torch.Tensor, y: torch.Tensor, m: int) -> float:
    """Var over the signs of one block's estimate of <x, y> (flat float64 vectors, modulus m): the exact formula
    for independent signs, used by tests and to size the default dimension."""
    buckets = torch.arange(len(x)) % m

    def per_bucket(values):
        return torch.zeros(m, dtype=torch.float64).index_add_(0, buckets, values)

    xx, yy, xy = per_bucket(x * x), per_bucket(y * y), per_bucket(x * y)
    return float((xx * yy + xy * xy).sum() - 2 * (x * x * y * y).sum())
