"""Per-prompt trace of covariance of each estimator over M groups of K continuations.

Every estimator here is affine in the rewards within a group, w_k = (c1 G_k + c0) / K, so its
gradient is x = c1 a + c0 s with a = grad (1/K) sum_k G_k lp_k and s = grad (1/K) sum_k lp_k.
- ``reference``: one backward pass per estimator (sum_k w_k lp_k), Welford statistics.
- ``fast``: two backward passes (a and s; only s when all rewards are equal), running sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_mse import estimators as est
from grpo_mse.tracecov import SumTrace, WelfordTrace, dot64

ENGINES = ("fast", "reference")


def affine_coefficients(weights: torch.Tensor, rewards: torch.Tensor) -> tuple[float, float]:
    """(c1, c0) with K w_k = c1 G_k + c0 for every k; raises if the weights are not affine in G."""
    k = rewards.shape[-1]
    scaled, g = (k * weights).double(), rewards.double()
    high, low = int(g.argmax()), int(g.argmin())
    if g[high] > g[low]:
        c1 = float((scaled[high] - scaled[low]) / (g[high] - g[low]))
        c0 = float(scaled[low] - c1 * g[low])
    else:
        c1, c0 = 0.0, float(scaled[0])
    if not torch.allclose(scaled, c1 * g + c0, rtol=1e-9, atol=1e-12):
        raise ValueError("estimator weights are not affine in the rewards within a group")
    return c1, c0


@dataclass
class PromptStats:
    """Per-prompt results: trace of covariance per estimator and the per-estimator mean gradients."""

    traces: dict[str, float]
    accumulators: dict[str, object]
    bias2: dict[str, float]  # biased estimators only: unbiased estimate of ||E x_e - g||^2


def bias_label(name: str) -> str:
    """Accumulator of x_name - x_oracle, whose mean estimates the bias of ``name``."""
    return f"{name}-oracleV"


def bias_squared(difference, m: int) -> float:
    """||mean d||^2 - tr Cov(d) / M: unbiased for ||E d||^2 (E||mean d||^2 = ||E d||^2 + tr Cov / M)."""
    mean = difference.mean()
    return dot64(mean, mean) - difference.trace() / m


def _grad(output: torch.Tensor, params: list[torch.Tensor], retain: bool) -> list[torch.Tensor]:
    grads = torch.autograd.grad(output, params, retain_graph=retain, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]


def prompt_traces(logprob_fn, params: list[torch.Tensor], groups: list[list[list[int]]],
                  rewards: torch.Tensor, value: float | None, names=est.UNBIASED,
                  engine: str = "fast") -> PromptStats:
    """Traces of covariance over the M groups; ``logprob_fn(continuations) -> [K]`` with grad."""
    if len(groups) < 2:
        raise ValueError("M must be >= 2 groups per prompt")
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    biased = [name for name in names if name in est.BIASED]
    labels = list(names) + [bias_label(name) for name in biased]
    stats = {label: (WelfordTrace if engine == "reference" else SumTrace)(params) for label in labels}
    for group, group_rewards in zip(groups, rewards):
        logprobs = logprob_fn(group)
        group_rewards = group_rewards.to(logprobs.device, torch.float64)
        weights = {name: est.weights(name, group_rewards, value) for name in names}
        if biased:
            oracle = est.oracle_weights(group_rewards, value)
            weights.update({bias_label(name): weights[name] - oracle for name in biased})
        if engine == "reference":
            for index, name in enumerate(labels):
                loss = (weights[name].to(logprobs.dtype) * logprobs).sum()
                stats[name].update(_grad(loss, params, retain=index < len(labels) - 1))
            continue
        k = logprobs.shape[0]
        equal = bool(group_rewards.max() == group_rewards.min())
        s = _grad(logprobs.sum() / k, params, retain=not equal)
        if equal:  # a = G_1 s: fold it into the coefficient of s
            basis, gram = [s], [[dot64(s, s)]]
        else:
            a = _grad((group_rewards.to(logprobs.dtype) * logprobs).sum() / k, params, retain=False)
            a_s = dot64(a, s)
            basis, gram = [a, s], [[dot64(a, a), a_s], [a_s, dot64(s, s)]]
        for name in labels:
            c1, c0 = affine_coefficients(weights[name], group_rewards)
            coefficients = [c0 + c1 * float(group_rewards[0])] if equal else [c1, c0]
            stats[name].add_combination(coefficients, basis, gram)
    traces = {name: stats[name].trace() for name in names}
    bias2 = {name: bias_squared(stats[bias_label(name)], len(groups)) for name in biased}
    return PromptStats(traces, stats, bias2)
