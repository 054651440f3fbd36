"""Trace of the sample covariance of vectors given as lists of tensors (one per model parameter).

tr Cov = sum_i Var(x_i) = (sum_m ||x_m||^2 - ||sum_m x_m||^2 / M) / (M - 1)  (denominator M-1).
"""

from __future__ import annotations

import torch


def float64_blocks(pieces, block: int):
    """Concatenate [R, n_i] pieces along columns into float64 [R, ~block] blocks (no model-sized copy)."""
    pending, size = [], 0
    for piece in pieces:
        pending.append(piece)
        size += piece.shape[1]
        if size >= block:
            yield torch.cat(pending, dim=1).double()
            pending, size = [], 0
    if pending:
        yield torch.cat(pending, dim=1).double()


def stacked_pair_dots64(stacked: list[torch.Tensor], pairs: list[tuple[int, int]], block: int = 1 << 20) -> list[float]:
    """<v_i, v_j> in float64 for each (i, j) in ``pairs``, v_r = row r of the stacked [R, *shape] tensors."""
    rows = stacked[0].shape[0]
    pieces = (piece for t in stacked for piece in t.reshape(rows, -1).split(block, dim=1))
    totals = torch.zeros(len(pairs), dtype=torch.float64, device=stacked[0].device)
    for values in float64_blocks(pieces, block):
        totals += torch.stack([torch.dot(values[i], values[j]) for i, j in pairs])
    return totals.tolist()


def dot64(left: list[torch.Tensor], right: list[torch.Tensor], block: int = 1 << 20) -> float:
    """<left, right> in float64: exact float64 products, ~``block`` coordinates at a time."""
    pieces = (torch.stack([x, y]) for a, b in zip(left, right)
              for x, y in zip(a.reshape(-1).split(block), b.reshape(-1).split(block)))
    total = torch.zeros((), dtype=torch.float64, device=left[0].device if left else "cpu")
    for values in float64_blocks(pieces, block):
        total += torch.dot(values[0], values[1])
    return float(total)


class WelfordTrace:
    """Reference: Welford running mean and M2 per coordinate (two fp32 buffers per parameter)."""

    def __init__(self, shapes_like: list[torch.Tensor]):
        self.count = 0
        self.running_mean = [torch.zeros_like(p, dtype=torch.float32) for p in shapes_like]
        self.m2 = [torch.zeros_like(p, dtype=torch.float32) for p in shapes_like]

    def update(self, vector: list[torch.Tensor]) -> None:
        """mean += (x - mean) / n;  M2 += (x - mean_old) * (x - mean_new)."""
        self.count += 1
        for mean, m2, x in zip(self.running_mean, self.m2, vector):
            x = x.float()
            delta = x - mean
            mean.add_(delta / self.count)
            m2.add_(delta * (x - mean))

    def trace(self) -> float:
        """sum(M2) / (n - 1)."""
        if self.count < 2:
            raise ValueError("trace of covariance needs at least 2 samples")
        return sum(float(m2.double().sum()) for m2 in self.m2) / (self.count - 1)

    def mean(self) -> list[torch.Tensor]:
        return self.running_mean

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.running_mean + self.m2)


class SumTrace:
    """Low memory: one fp32 running sum per parameter plus the float64 sum of squared norms."""

    def __init__(self, shapes_like: list[torch.Tensor]):
        self.count = 0
        self.sum_sq = 0.0
        self.total = [torch.zeros_like(p, dtype=torch.float32) for p in shapes_like]

    def add_combination(self, coefficients: list[float], vectors: list[list[torch.Tensor]],
                        gram: list[list[float]]) -> None:
        """Add x = sum_j c_j v_j given the Gram matrix <v_i, v_j>: ||x||^2 = c^T gram c."""
        self.count += 1
        self.sum_sq += sum(ci * cj * gram[i][j] for i, ci in enumerate(coefficients)
                           for j, cj in enumerate(coefficients))
        for c, vector in zip(coefficients, vectors):
            if c != 0.0:
                torch._foreach_add_(self.total, [v.float() for v in vector], alpha=c)

    def update(self, vector: list[torch.Tensor]) -> None:
        """Add one vector x."""
        self.add_combination([1.0], [vector], [[dot64(vector, vector)]])

    def trace(self) -> float:
        """(sum ||x||^2 - ||sum x||^2 / n) / (n - 1)."""
        if self.count < 2:
            raise ValueError("trace of covariance needs at least 2 samples")
        return (self.sum_sq - dot64(self.total, self.total) / self.count) / (self.count - 1)

    def mean(self) -> list[torch.Tensor]:
        return [t / self.count for t in self.total]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.total)
