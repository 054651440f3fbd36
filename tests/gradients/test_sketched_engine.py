"""The sketched engine against the fast engine on the same samples: exact when no two coordinates share a bucket,
unbiased over sketch seeds otherwise, with a block spread that estimates its own error."""

import copy
import statistics
from dataclasses import replace

import pytest
from test_engine import _setup  # the same samples as the fast engine's tests

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import prompt_traces
from grpo_mse.gradients.sketch import CountSketch, SketchSpec, is_prime
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


def test_every_row_is_sketched_as_it_is_made_so_one_model_sized_row_lives_at_a_time(random_lm, monkeypatch):
    import grpo_mse.gradients.trace_engines.sketched as sketched_module

    setup = _setup(random_lm, 4, 3, seed=23)
    live, most = [], [0]
    apply = CountSketch.apply

    def counting(self, vector):
        live.append(vector)
        most[0] = max(most[0], sum(1 for v in live if v is not None))
        out = apply(self, vector)
        live[-1] = None  # the caller drops the row once sketched
        return out

    monkeypatch.setattr(sketched_module.CountSketch, "apply", counting)
    _sketched(setup, SketchSpec(dim=64, blocks=2), 0.3)
    assert len(live) >= 4 and most[0] == 1
