"""The sketched engine against the fast engine on the same samples: exact when no two coordinates share a bucket,
unbiased over sketch seeds otherwise, with a block spread that estimates its own error."""

import copy
import statistics
from dataclasses import replace

import pytest
import torch
from test_engine import _setup  # the same samples as the fast engine's tests

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import prompt_traces
from grpo_mse.gradients.sketch import SketchSpec, is_prime
from grpo_mse.gradients.trace_engines import EngineSettings


def _sketched(setup, spec, value, names=est.ALL):
    _, groups, rewards, params, logprob_fn = setup
    settings = EngineSettings("sketched", measure_score=True, sketch_dim=spec.dim, sketch_blocks=spec.blocks)
    settings = replace(settings, sketch_seed=spec.seed)
    return prompt_traces(logprob_fn, params, groups, rewards, value, names, settings)


def _fast(setup, value, names=est.ALL):
    _, groups, rewards, params, logprob_fn = setup
    return prompt_traces(logprob_fn, params, groups, rewards, value, names, EngineSettings(measure_score=True))


def test_a_sketch_without_collisions_gives_the_fast_engines_results_in_every_block(random_lm):
    setup = _setup(copy.deepcopy(random_lm).double(), 4, 3, seed=21)  # float64: the engines' roundings vanish
    n = sum(p.numel() for p in setup[3])
    blocks = 2
    spec = SketchSpec(dim=blocks * (n + 200), blocks=blocks, seed=1)
    assert all(m > n and is_prime(m) for m in spec.moduli())  # each coordinate in its own bucket of every block
    fast = _fast(setup, 0.3)
    sketched = _sketched(setup, spec, 0.3)
    assert fast.traces["naive"] > 0
    for name in est.ALL:
        assert sketched.traces[name] == pytest.approx(fast.traces[name], rel=1e-9)
        assert sketched.blocks.traces[name] == pytest.approx([fast.traces[name]] * blocks, rel=1e-9)
    for name in fast.bias2:
        assert sketched.bias2[name] == pytest.approx(fast.bias2[name], rel=1e-8, abs=1e-9)
        assert sketched.blocks.bias2[name] == pytest.approx([fast.bias2[name]] * blocks, rel=1e-8, abs=1e-9)
    assert sketched.bias2_own == pytest.approx(fast.bias2_own, rel=1e-8, abs=1e-9)
    assert sketched.mean_score_sq == pytest.approx(fast.mean_score_sq, rel=1e-8, abs=1e-9)
    assert sketched.score_trace == pytest.approx(fast.score_trace, rel=1e-9)


def test_small_sketches_are_unbiased_over_seeds_and_their_block_spread_estimates_their_error(random_lm):
    setup = _setup(random_lm, 3, 3, seed=22)
    names = ("naive", "oracleV")
    fast = _fast(setup, 0.4, names).traces
    draws = [_sketched(setup, SketchSpec(dim=256, blocks=4, seed=seed), 0.4, names) for seed in range(120)]
    for name in names:
        traces = [d.traces[name] for d in draws]
        spread = statistics.stdev(traces)
        assert spread > 1e-3 * fast[name]  # the sketch is small enough to err
        assert abs(statistics.fmean(traces) - fast[name]) < 4 * spread / len(traces) ** 0.5
        # the block spread's variance of the mean, averaged over seeds, against the variance over seeds
        estimated = statistics.fmean(statistics.variance(d.blocks.traces[name]) / 4 for d in draws)
        assert estimated == pytest.approx(spread**2, rel=0.35)


def test_no_whole_gradient_row_is_made_each_parameter_is_sketched_as_autograd_accumulates_it(random_lm, monkeypatch):
    """The engine never asks autograd for a whole gradient (torch.autograd.grad fails here); every parameter's
    gradient is folded into the sketch by its hook and dropped, so no parameter keeps a .grad afterwards."""
    from grpo_mse.gradients import sketch as sketch_module

    setup = _setup(random_lm, 4, 3, seed=23)
    params = setup[3]
    added = []
    add = sketch_module.Folding.add

    def counting(self, index, tensor):
        added.append(index)
        add(self, index, tensor)

    def no_whole_rows(*args, **kwargs):
        raise AssertionError("torch.autograd.grad makes a whole gradient row")

    monkeypatch.setattr(sketch_module.Folding, "add", counting)
    monkeypatch.setattr(torch.autograd, "grad", no_whole_rows)
    result = _sketched(setup, SketchSpec(dim=64, blocks=2), 0.3)
    assert result.traces["naive"] > 0
    assert len(added) >= 4 * len(params) and set(added) <= set(range(len(params)))
    assert all(p.grad is None for p in params)
