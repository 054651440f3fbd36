"""The fast engine (two backward passes, running sums) equals the reference (one backward per
estimator, Welford) and an explicit per-group computation with numpy, on the same samples."""

import numpy as np
import pytest
import torch

from grpo_mse import estimators as est
from grpo_mse.engine import prompt_traces
from grpo_mse.logprobs import sequence_logprobs


def _setup(model, m, k, seed):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, 23, (5,), generator=gen).tolist()
    groups = [[torch.randint(3, 23, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen).tolist()
               for _ in range(k)] for _ in range(m)]
    rewards = torch.randint(0, 2, (m, k), generator=gen).double()
    rewards[-1] = torch.arange(k) % 2  # one group with mixed rewards
    rewards[0] = 1.0  # one group with equal rewards: the fast engine's one-backward path
    params = [p for p in model.parameters()]

    def logprob_fn(continuations):
        return sequence_logprobs(model, prompt, continuations, eos_ids=[1], pad_id=0)
    return prompt, groups, rewards, params, logprob_fn


def _explicit_traces(model, groups, rewards, value, logprob_fn, names):
    params = list(model.parameters())
    vectors = {n: [] for n in names}
    for group, g in zip(groups, rewards):
        for n in names:
            loss = (est.weights(n, g, value).float() * logprob_fn(group)).sum()
            grads = torch.autograd.grad(loss, params)
            vectors[n].append(torch.cat([x.reshape(-1) for x in grads]).double().numpy())
    return {n: float(np.trace(np.cov(np.stack(v), rowvar=False, ddof=1))) for n, v in vectors.items()}


@pytest.mark.parametrize("m,k", [(2, 2), (5, 4)])
def test_fast_equals_reference_equals_explicit(random_lm, m, k):
    names = est.ALL
    _, groups, rewards, params, logprob_fn = _setup(random_lm, m, k, seed=m * 10 + k)
    fast = prompt_traces(logprob_fn, params, groups, rewards, 0.4, names, "fast").traces
    reference = prompt_traces(logprob_fn, params, groups, rewards, 0.4, names, "reference").traces
    explicit = _explicit_traces(random_lm, groups, rewards, 0.4, logprob_fn, names)
    assert explicit["naive"] > 0 and explicit["oracleV"] > 0
    for n in names:
        assert fast[n] == pytest.approx(explicit[n], rel=1e-5, abs=1e-12)
        assert reference[n] == pytest.approx(explicit[n], rel=1e-5, abs=1e-12)


def test_fast_engine_counts_backward_passes(random_lm, monkeypatch):
    import grpo_mse.engine as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 4, 3, seed=7)
    rewards[1] = 0.0
    calls = []
    original = engine._grad
    monkeypatch.setattr(engine, "_grad", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    prompt_traces(logprob_fn, params, groups, rewards, 0.5, est.UNBIASED, "fast")
    equal_groups = int(sum(bool(r.max() == r.min()) for r in rewards))
    assert len(calls) == 2 * 4 - equal_groups
    calls.clear()
    prompt_traces(logprob_fn, params, groups, rewards, 0.5, est.UNBIASED, "reference")
    assert len(calls) == 3 * 4


def test_grpo_vector_is_zero_for_equal_rewards_and_still_counts(random_lm):
    _, groups, rewards, params, logprob_fn = _setup(random_lm, 3, 2, seed=3)
    rewards[:] = 1.0
    stats = prompt_traces(logprob_fn, params, groups, rewards, 0.5, est.UNBIASED, "fast")
    assert stats.traces["grpo"] == 0.0 and stats.accumulators["grpo"].count == 3
    assert stats.traces["naive"] > 0


def test_m_below_two_is_rejected(random_lm):
    _, groups, rewards, params, logprob_fn = _setup(random_lm, 2, 2, seed=1)
    with pytest.raises(ValueError, match="M must be >= 2"):
        prompt_traces(logprob_fn, params, groups[:1], rewards[:1], 0.5)
