"""The sketched engine (``--engine sketched``): every group's gradient vectors pass through one seeded count sketch
(``gradients.sketch``) as they leave the backward pass, and the statistics keep only sketched vectors.

Per group, the fast engine's gradient rows (a and s, or one row per reward value for a group with two reward
values, none when every estimator is exactly 0: ``fast.group_plan``), each made by one backward pass whose
parameters' gradients are sketched as autograd accumulates them (``sketch.sketched_gradient``): no whole gradient
row exists, and the statistics hold d coordinates per label (a float64 Welford mean and M2) instead of a
model-sized running sum. Every trace, bias and Gram entry is an inner product of sketched vectors, so
each is unbiased for the exact engines' value on the same samples; the sketch's R blocks give R independent
estimates (``SketchedTrace.blocks``), whose spread measures the sketch's own error (``records.sketch_summary``).
One group a pass: this engine is for models whose gradients are large, where the fast engine also takes one.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from grpo_mse.gradients.engine import PromptWork
from grpo_mse.gradients.sketch import CountSketch, SketchSpec, sketched_gradient
from grpo_mse.gradients.trace_engines import EngineSettings, TraceEngine
from grpo_mse.gradients.trace_engines.fast import (
    distinct_continuations,
    group_cotangents,
    group_plan,
    reward_split_rows,
    splits_by_reward,
)
from grpo_mse.gradients.trace_engines.reference import WelfordTrace


class SketchedTrace(WelfordTrace):
    """Welford statistics of sketched vectors, one tensor per sketch block (each scaled by 1/sqrt(R) in the sketch,
    so R times a block's share of a statistic is that block's own estimate). ``scratch``: two sketch-sized buffers
    the prompt's labels share for the update's differences (no new vectors a group: the memory plan counts these)."""

    def __init__(self, shapes_like: list[torch.Tensor], scratch: tuple[torch.Tensor, torch.Tensor]):
        super().__init__(shapes_like)
        self.scratch = scratch

    def update(self, vector: torch.Tensor) -> None:
        """Welford's step in place: delta = x - mean; mean += delta / n; M2 += delta (x - mean)."""
        self.count += 1
        before, after = (buffer.copy_(vector) for buffer in self.scratch)
        offset = 0
        for mean, m2 in zip(self.running_mean, self.m2):
            part = slice(offset, offset + len(mean))
            delta = before[part].sub_(mean)
            mean.add_(delta, alpha=1.0 / self.count)
            m2.addcmul_(delta, after[part].sub_(mean))
            offset += len(mean)

    def release(self) -> None:
        """Drop the statistics' vectors (the next prompt's are made before this prompt's stats object is gone)."""
        self.running_mean, self.m2, self.scratch = [], [], ()

    def blocks(self) -> list[tuple[float, float]]:
        """Each block's (trace, ||mean||^2)."""
        r, count = len(self.m2), self.count
        return [
            (r * float(m2.sum()) / (count - 1), r * float(mean @ mean)) for m2, mean in zip(self.m2, self.running_mean)
        ]


@lru_cache(maxsize=1)
def _sketch(spec: SketchSpec, shapes: tuple[tuple[int, ...], ...], device: str) -> CountSketch:
    """The run's sketch, drawn once (its signs are n bytes; the same spec and shapes give the same sketch)."""
    return CountSketch(spec, [torch.empty(shape, device="meta") for shape in shapes], device=device)


def sketch_of(settings: EngineSettings, params: list[torch.Tensor]) -> CountSketch:
    spec = SketchSpec(settings.sketch_dim, settings.sketch_blocks, settings.sketch_seed)
    return _sketch(spec, tuple(tuple(p.shape) for p in params), str(params[0].device))


def sketched_rows(logprob_fn, params, group, group_rewards, plan, sketch: CountSketch):
    """The group's gradient rows, each sketched parameter by parameter as its backward pass makes it (no whole
    gradient row is ever held); returns (sketched rows, plan)."""

    def sketched(output, params, retain):
        return sketched_gradient(output, params, sketch, retain)

    if splits_by_reward([plan], group_rewards.view(1, -1)):
        rows, plans = reward_split_rows(logprob_fn, params, group, group_rewards, plan, gradient_of=sketched)
        return rows, plans[0]
    cotangents, _ = group_cotangents(group_rewards.view(1, -1), [plan[0]])
    if not len(cotangents):  # every estimator is exactly 0 for this group: no pass at all
        return [], plan
    unique, cotangents = distinct_continuations(group, cotangents)
    logprobs = logprob_fn(unique)
    cotangents = cotangents.to(logprobs.device, logprobs.dtype)
    last = len(cotangents) - 1
    rows = [sketched((row * logprobs).sum(), params, retain=index < last) for index, row in enumerate(cotangents)]
    return rows, plan


def accumulate(work: PromptWork, settings: EngineSettings, pool=None) -> dict[str, SketchedTrace]:
    """Every label's sketched statistics over the prompt's groups (the run's pool is not used: nothing model-sized
    is kept)."""
    params = work.params
    sketch = sketch_of(settings, params)
    device = params[0].device
    vector, *scratch = (torch.empty(sketch.dim, dtype=torch.float64, device=device) for _ in range(3))
    blocks = list(vector.split(sketch.moduli))  # shapes only
    stats = {label: SketchedTrace(blocks, tuple(scratch)) for label in work.labels}
    for group, group_rewards in zip(work.groups, work.rewards.to(torch.float64)):
        plan = group_plan(work.weights(group_rewards), group_rewards)
        rows, (_, coefficients) = sketched_rows(work.logprob_fn, params, group, group_rewards, plan, sketch)
        for label in work.labels:
            vector.zero_()
            for c, row in zip(coefficients[label], rows):
                vector.add_(row, alpha=c)
            stats[label].update(vector)
    return stats


ENGINE = TraceEngine(accumulate, shared_prompt=True)
