"""The frame every engine runs in (``engine.prompt_traces``) measures the biased estimators' squared biases, std-GRPO's
bias against its own target and the score's ||E s||^2 and tr Cov right: each checked against per-group gradients
computed explicitly with autograd and numpy (found by mutation testing, results/mutation: the sign of the difference
from the oracle, the own target's scale and the score's 1/K weights were unchecked)."""

import numpy as np
import pytest
import torch

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import BlockEstimates, gradient, prompt_traces
from grpo_mse.gradients.trace_engines import EngineSettings
from grpo_mse.policy.logprobs import sequence_logprobs

M, K, VALUE = 3, 3, 0.4


def flat_gradient(model, weights, logprob_fn, group) -> np.ndarray:
    loss = (weights.float() * logprob_fn(group)).sum()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]).double().numpy()


def unbiased_square(rows: np.ndarray) -> float:
    """||mean||^2 - tr Cov / M over the rows (one per group): unbiased for ||E row||^2."""
    return float(rows.mean(0) @ rows.mean(0) - np.trace(np.cov(rows, rowvar=False, ddof=1)) / len(rows))


@pytest.fixture(scope="module")
def prompt(random_lm):
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(3, 23, (4,), generator=gen).tolist()
    groups = [[torch.randint(3, 23, (1 + (g + k) % 3,), generator=gen).tolist() for k in range(K)] for g in range(M)]
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)

    def logprob_fn(continuations):
        return sequence_logprobs(random_lm, tokens, continuations, eos_ids=[1], pad_id=0)

    return groups, rewards, logprob_fn


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_biases_own_target_and_score_against_explicit_gradients(random_lm, prompt, engine):
    groups, rewards, logprob_fn = prompt
    params = list(random_lm.parameters())
    settings = EngineSettings(engine, measure_score=True)
    stats = prompt_traces(logprob_fn, params, groups, rewards, VALUE, est.ALL, settings)

    def rows(weights_of):
        return np.stack([flat_gradient(random_lm, weights_of(r), logprob_fn, g) for g, r in zip(groups, rewards)])

    oracle = rows(lambda r: est.oracle_weights(r, VALUE))
    assert est.BIASED and set(stats.bias2) == set(est.BIASED)
    for name in est.BIASED:
        difference = rows(lambda r, name=name: est.weights(name, r, VALUE)) - oracle
        assert stats.bias2[name] == pytest.approx(unbiased_square(difference), rel=1e-4, abs=1e-9)
    own = est.own_targets(est.ALL)
    assert own and set(stats.bias2_own) == set(own)
    for name in own:
        scale = est.get(name).own_target.scale(VALUE)
        difference = rows(lambda r, name=name: est.weights(name, r, VALUE)) - scale * oracle
        assert stats.bias2_own[name] == pytest.approx(unbiased_square(difference), rel=1e-4, abs=1e-9)
    score = rows(lambda r: torch.full_like(r, 1.0 / K))  # s_g = (1/K) sum_k grad lp_k
    assert stats.mean_score_sq == pytest.approx(unbiased_square(score), rel=1e-4, abs=1e-9)
    assert stats.score_trace == pytest.approx(float(np.trace(np.cov(score, rowvar=False, ddof=1))), rel=1e-4)
    assert stats.blocks is None  # an exact engine makes one estimate, no blocks


def test_block_mse_adds_each_blocks_squared_bias_to_its_trace():
    blocks = BlockEstimates({"naive": [1.0, 2.0], "drgrpo": [3.0, 4.0]}, {"drgrpo": [0.5, -0.25]})
    assert blocks.mse(["naive", "drgrpo"]) == {"naive": [1.0, 2.0], "drgrpo": [3.5, 3.75]}


def test_gradient_of_a_parameter_the_output_does_not_use_is_zero():
    used, unused = torch.tensor([2.0], requires_grad=True), torch.ones(2, 3, requires_grad=True)
    grads = gradient((used**2).sum(), [used, unused], retain=False)
    assert grads[0].tolist() == [4.0] and torch.equal(grads[1], torch.zeros(2, 3))


@pytest.mark.parametrize("measure_score", [True, False])
def test_sketched_blocks_hold_the_score_square_exactly_when_it_is_measured(random_lm, prompt, measure_score):
    groups, rewards, logprob_fn = prompt
    settings = EngineSettings("sketched", measure_score=measure_score, sketch_dim=1 << 12, sketch_blocks=3)
    stats = prompt_traces(logprob_fn, list(random_lm.parameters()), groups, rewards, VALUE, est.ALL, settings)
    blocks = stats.blocks
    assert set(blocks.traces) == set(est.ALL) and set(blocks.bias2) == set(est.BIASED)
    if measure_score:  # one unbiased ||E s||^2 per block; their mean is the prompt's
        assert len(blocks.mean_score_sq) == 3
        assert float(np.mean(blocks.mean_score_sq)) == pytest.approx(stats.mean_score_sq, rel=1e-9, abs=1e-12)
    else:
        assert blocks.mean_score_sq is None
