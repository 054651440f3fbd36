"""The reference engine (``--engine reference``): the original algorithm. Per group, one forward pass (the prompt
recomputed for every sequence) and one backward pass per label (sum_k w_k lp_k), each vector added to its label's
Welford running mean and M2 (two model-sized buffers per label)."""

from __future__ import annotations

import torch

from grpo_mse.gradients.engine import PromptWork, gradient
from grpo_mse.gradients.memory import stats_dtype
from grpo_mse.gradients.statistics import Accumulator
from grpo_mse.gradients.trace_engines import EngineSettings, TraceEngine


class WelfordTrace(Accumulator):
    """Welford running mean and M2 per coordinate (two buffers per parameter, fp32 for a low-precision model)."""

    def __init__(self, shapes_like: list[torch.Tensor]):
        self.count = 0
        self.running_mean = [torch.zeros_like(p, dtype=stats_dtype(p)) for p in shapes_like]
        self.m2 = [torch.zeros_like(p, dtype=stats_dtype(p)) for p in shapes_like]

    def update(self, vector: list[torch.Tensor]) -> None:
        """mean += (x - mean) / n;  M2 += (x - mean_old) * (x - mean_new)."""
        self.count += 1
        for mean, m2, x in zip(self.running_mean, self.m2, vector):
            x = x.to(mean.dtype)
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


def accumulate(work: PromptWork, settings: EngineSettings, pool=None) -> dict[str, WelfordTrace]:
    """Every label's Welford statistics over the prompt's groups (``settings`` and ``pool`` are the fast engine's)."""
    stats = {label: WelfordTrace(work.params) for label in work.labels}
    for group, group_rewards in zip(work.groups, work.rewards):
        logprobs = work.logprob_fn(group)
        weights = work.weights(group_rewards.to(logprobs.device, torch.float64))
        for index, name in enumerate(work.labels):
            loss = (weights[name].to(logprobs.dtype) * logprobs).sum()
            stats[name].update(gradient(loss, work.params, retain=index < len(work.labels) - 1))
    return stats


ENGINE = TraceEngine(accumulate, shared_prompt=False)
