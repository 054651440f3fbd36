"""Per-prompt trace of covariance of each estimator over M groups of K continuations: the frame every statistics
engine runs in (``prompt_traces``). It names the statistics a prompt needs (``labels``: the estimators, their
differences from the oracle for the biases, the score), hands the engine chosen by ``EngineSettings`` (the registry
``gradients.trace_engines``) the prompt's groups and every label's weights (``PromptWork``), and reads the traces and
squared biases from the accumulators it returns (``PromptStats``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients import trace_engines
from grpo_mse.gradients.statistics import Accumulator, BufferPool
from grpo_mse.gradients.trace_engines import EngineSettings


@dataclass
class PromptStats:
    """Per-prompt results: trace of covariance per estimator and every label's accumulator (its mean gradient)."""

    traces: dict[str, float]
    accumulators: dict[str, Accumulator]
    bias2: dict[str, float]  # biased estimators only: unbiased estimate of ||E x_e - g||^2
    mean_score_sq: float = float("nan")  # unbiased ||E s||^2 from the group-mean scores s_g = (1/K) sum_k s_k
    score_trace: float = float("nan")  # tr Cov(s_g)
    bias2_own: dict[str, float] | None = None  # estimators with an own target t: ||E x - t||^2 (unbiased)
    blocks: BlockEstimates | None = None  # an engine's independent estimates (``Accumulator.blocks``), else None

    def release(self) -> None:
        """Hand the accumulators' pooled buffers back (their vectors are gone afterwards)."""
        for accumulator in self.accumulators.values():
            accumulator.release()


@dataclass
class BlockEstimates:
    """Each of an engine's independent estimates of a prompt's statistics (the sketched engine's R blocks; their mean
    is what ``PromptStats`` holds): per block, each estimator's trace and squared bias, and ||E s||^2."""

    traces: dict[str, list[float]]
    bias2: dict[str, list[float]]
    mean_score_sq: list[float] | None = None

    @classmethod
    def of(cls, stats: dict[str, Accumulator], names, biased, m: int, score: bool) -> BlockEstimates | None:
        """From the accumulators' ``blocks`` (None when the engine makes one exact computation)."""
        if stats[names[0]].blocks() is None:
            return None

        def squares(label):  # unbiased ||E x||^2 per block, as ``bias_squared``
            return [square - trace / m for trace, square in stats[label].blocks()]

        traces = {name: [trace for trace, _ in stats[name].blocks()] for name in names}
        return cls(traces, {name: squares(bias_label(name)) for name in biased}, squares(SCORE) if score else None)

    def mse(self, names) -> dict[str, list[float]]:
        """Each estimator's MSE (tr Cov + bias^2 for a biased one) under each block."""
        return {
            name: [t + b for t, b in zip(self.traces[name], self.bias2.get(name, [0.0] * len(self.traces[name])))]
            for name in names
        }


@dataclass(frozen=True)
class PromptWork:
    """What an engine receives for one prompt (``gradients.trace_engines``' interface)."""

    logprob_fn: Callable  # continuations -> [n] log-probabilities with grad
    params: list[torch.Tensor]  # the trainable parameters: every vector has one tensor per parameter
    groups: list[list[list[int]]]  # M groups of K continuations (token ids)
    rewards: torch.Tensor  # [M, K]
    labels: list[str]  # the statistics to accumulate, in order
    weights: Callable[[torch.Tensor], dict[str, torch.Tensor]]  # one group's rewards [K] -> {label: weights [K]}


SCORE = "score"  # accumulator of s_g = (1/K) sum_k grad lp_k (weights 1/K)


def own_label(name: str) -> str:
    """Accumulator of x_name - scale(V) x_oracle (the registry's ``own_target``), whose mean estimates the bias of
    ``name`` against its own target scale(V) g; "grpo_std-own" for std-GRPO."""
    return f"{name}-own"


def bias_label(name: str) -> str:
    """Accumulator of x_name - x_oracle, whose mean estimates the bias of ``name``."""
    return f"{name}-{est.ORACLE}"


def bias_squared(difference: Accumulator, m: int) -> float:
    """||mean d||^2 - tr Cov(d) / M: unbiased for ||E d||^2 (E||mean d||^2 = ||E d||^2 + tr Cov / M)."""
    return difference.mean_square() - difference.trace() / m


def gradient(output: torch.Tensor, params: list[torch.Tensor], retain: bool) -> list[torch.Tensor]:
    """grad output with respect to ``params``, zeros for a parameter it does not use."""
    grads = torch.autograd.grad(output, params, retain_graph=retain, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]


def prompt_traces(
    logprob_fn,
    params: list[torch.Tensor],
    groups: list[list[list[int]]],
    rewards: torch.Tensor,
    value: float | None,
    names=est.UNBIASED,
    settings: EngineSettings | None = None,
    pool: BufferPool | None = None,
) -> PromptStats:
    """Traces of covariance over the M groups (and the biases' and score's statistics) by the engine ``settings``
    names (None: the default ``EngineSettings``, the fast engine); ``logprob_fn(continuations) -> [n]`` with grad;
    ``value`` the prompt's V (None: not known). ``settings.measure_score``: also accumulate the group-mean score s_g
    (||E s||^2, tr Cov s_g; costs the s vector of groups that no estimator needs, e.g. all rewards 0). ``pool``: the
    run's buffers, which the engine's accumulators may take (``PromptStats.release`` hands them back)."""
    if len(groups) < 2:
        raise ValueError("M must be >= 2 groups per prompt")
    settings = settings or EngineSettings()
    engine = trace_engines.load(settings.name)
    measure_score = settings.measure_score
    biased = [name for name in names if name in est.BIASED]
    own = est.own_targets(names) if value is not None and 0.0 < float(value) < 1.0 else []
    labels = list(names) + [bias_label(name) for name in biased] + [SCORE] * measure_score
    labels += [own_label(name) for name in own]
    own_scales = {name: est.get(name).own_target.scale(float(value)) for name in own}  # once per prompt

    def group_weights(group_rewards):
        weights = {name: est.weights(name, group_rewards, value) for name in names}
        oracle = est.oracle_weights(group_rewards, value) if biased or own else None  # once per group
        weights.update({bias_label(name): weights[name] - oracle for name in biased})
        weights.update({own_label(name): weights[name] - scale * oracle for name, scale in own_scales.items()})
        if measure_score:
            weights[SCORE] = torch.full_like(group_rewards, 1.0 / group_rewards.shape[-1])
        return weights

    stats = engine.accumulate(PromptWork(logprob_fn, params, groups, rewards, labels, group_weights), settings, pool)
    traces = {name: stats[name].trace() for name in names}
    bias2 = {name: bias_squared(stats[bias_label(name)], len(groups)) for name in biased}
    bias2_own = {name: bias_squared(stats[own_label(name)], len(groups)) for name in own}
    out = PromptStats(traces, stats, bias2, bias2_own=bias2_own or None)
    out.blocks = BlockEstimates.of(stats, names, biased, len(groups), measure_score)
    if measure_score:
        out.mean_score_sq, out.score_trace = bias_squared(stats[SCORE], len(groups)), stats[SCORE].trace()
    return out
