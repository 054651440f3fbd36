"""The sketched statistics engine: every group's gradient vectors pass through one seeded count sketch
(``gradients.sketch``) as they leave the backward pass, and the statistics keep only sketched vectors.

Per group, the same gradient rows as the fast engine (a and s, or one row per reward value for a group with two
reward values, none when every estimator is exactly 0), made one at a time and sketched at once: one model-sized
row lives at a time and the statistics hold d coordinates per label (a float64 Welford mean and M2) instead of a
model-sized running sum. Every trace, bias and Gram entry is an inner product of sketched vectors, so each is
unbiased for the exact engine's value on the same samples; the R sketch blocks give R estimates whose spread
measures the sketch's own error (``SketchBlocks``, ``analysis.sketch_error``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_mse.gradients.engine import (
    SCORE,
    LabelPlan,
    PromptStats,
    _grad,
    bias_label,
    distinct_continuations,
    group_cotangents,
    group_plan,
    reward_split_rows,
    splits_by_reward,
)
from grpo_mse.gradients.sketch import CountSketch
from grpo_mse.gradients.statistics import WelfordTrace


@dataclass
class SketchBlocks:
    """Each sketch block's own estimate of a prompt's statistics (their mean is what the run reports)."""

    traces: dict[str, list[float]]
    bias2: dict[str, list[float]]
    mean_score_sq: list[float] | None = None


def block_values(accumulator: WelfordTrace, m: int) -> tuple[list[float], list[float]]:
    """(trace, unbiased ||E x||^2) under each block of a Welford accumulator over the sketch's R blocks (each block
    scaled by 1/sqrt(R) in the sketched vector, so R times its share is the block's own estimate)."""
    blocks, count = len(accumulator.m2), accumulator.count
    traces = [blocks * float(m2.sum()) / (count - 1) for m2 in accumulator.m2]
    squares = [blocks * float(mean @ mean) for mean in accumulator.running_mean]
    return traces, [square - trace / m for square, trace in zip(squares, traces)]


def sketched_rows(logprob_fn, params, group, group_rewards, plan, sketch: CountSketch):
    """The group's gradient rows, each sketched as soon as it is made; returns (sketched rows, plan)."""
    if splits_by_reward([plan], group_rewards.view(1, -1)):
        rows, plans = reward_split_rows(logprob_fn, params, group, group_rewards, plan, keep=sketch.apply)
        return rows, plans[0]
    cotangents, _ = group_cotangents(group_rewards.view(1, -1), [plan[0]])
    if not len(cotangents):  # every estimator is exactly 0 for this group: no pass at all
        return [], plan
    unique, cotangents = distinct_continuations(group, cotangents)
    logprobs = logprob_fn(unique)
    cotangents = cotangents.to(logprobs.device, logprobs.dtype)
    last = len(cotangents) - 1
    return [
        sketch.apply(_grad((row * logprobs).sum(), params, retain=index < last)) for index, row in enumerate(cotangents)
    ], plan


def sketched_prompt_traces(
    logprob_fn, params, groups, rewards: torch.Tensor, value, names, sketch: CountSketch, measure_score: bool = False
) -> PromptStats:
    """Traces of covariance over the M groups, as ``engine.prompt_traces``, from sketched gradient vectors; the
    result's ``sketch`` holds each block's own estimates."""
    if len(groups) < 2:
        raise ValueError("M must be >= 2 groups per prompt")
    plan = LabelPlan.of(names, value, measure_score)
    device = params[0].device
    shapes = [torch.zeros(m, dtype=torch.float64, device=device) for m in sketch.moduli]
    stats = {label: WelfordTrace(shapes) for label in plan.labels}
    zero = torch.zeros(sketch.dim, dtype=torch.float64, device=device)
    for group, group_rewards in zip(groups, rewards.to(torch.float64)):
        rows, (_, coefficients) = sketched_rows(
            logprob_fn, params, group, group_rewards, group_plan(plan.weights(group_rewards), group_rewards), sketch
        )
        for label in plan.labels:
            vector = sum((c * row for c, row in zip(coefficients[label], rows)), zero)
            stats[label].update(list(vector.split(sketch.moduli)))
    out = plan.finish(stats, len(groups))
    m = len(groups)
    traces = {name: block_values(stats[name], m)[0] for name in plan.names}
    bias2 = {name: block_values(stats[bias_label(name)], m)[1] for name in plan.biased}
    out.sketch = SketchBlocks(traces, bias2, block_values(stats[SCORE], m)[1] if measure_score else None)
    return out


def block_mse(blocks: SketchBlocks, names) -> dict[str, list[float]]:
    """Each estimator's MSE (tr Cov + bias^2 for a biased one) under each block, as the run's records keep it."""
    out = {}
    for name in names:
        traces = blocks.traces[name]
        out[name] = [trace + bias for trace, bias in zip(traces, blocks.bias2.get(name, [0.0] * len(traces)))]
    return out
