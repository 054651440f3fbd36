"""The reference and sketched engines at the edges their other tests miss (issue 58): rewards with more than two
values in a group (the sketched engine's a and s rows from one forward graph), a model of one parameter tensor,
rewards handed over in float32 (as the run builds them) and a float64 model, against an explicit float64
computation; each forward graph freed by its last backward pass; the statistics made on the parameters' device."""

import pytest
import torch

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import PromptWork, prompt_traces
from grpo_mse.gradients.sketch import SketchSpec, is_prime
from grpo_mse.gradients.trace_engines import EngineSettings, load

VOCAB = 5
# Groups with three reward values (two rows of one graph), two (split by reward), one (a single row), and a
# second three-valued one; float32, as tracecov builds rewards; values with no exact float32 mean or spread.
REWARDS = torch.tensor([[0.1, 0.7, 0.25], [1.0, 0.0, 1.0], [0.5, 0.5, 0.5], [0.3, 0.9, 0.6]], dtype=torch.float32)
GROUPS = [[[1, 2], [3], [4, 4, 2]], [[2], [1, 3], [0, 4]], [[3, 3], [1], [2, 0, 1]], [[4], [0, 2], [1, 1, 3]]]


def _bigram(dtype=torch.float64):
    """One parameter tensor W [VOCAB, VOCAB]: lp(c) = sum_t log_softmax(W[c_{t-1}])[c_t] (c_0 follows token 0).
    log_softmax keeps its output for the backward pass, so a freed graph cannot be run again; every graph made is
    kept in ``graphs`` for the test to try."""
    table = torch.randn(VOCAB, VOCAB, dtype=dtype, generator=torch.Generator().manual_seed(5)).requires_grad_()
    graphs = []

    def logprob_fn(continuations):
        rows = []
        for tokens in continuations:
            previous = torch.tensor([0] + tokens[:-1])
            rows.append(torch.log_softmax(table[previous], -1).gather(1, torch.tensor(tokens)[:, None]).sum())
        graphs.append(torch.stack(rows))
        return graphs[-1]

    return table, logprob_fn, graphs


def _explicit_traces(value):
    """tr Cov over the groups of every estimator's gradient, each group's made by autograd from its float64
    weights (the rewards read exactly in float64)."""
    table, logprob_fn, _ = _bigram()
    traces = {}
    for name in est.ALL:
        rows = []
        for group, rewards in zip(GROUPS, REWARDS.double()):
            loss = (est.weights(name, rewards, value) * logprob_fn(group)).sum()
            rows.append(torch.autograd.grad(loss, table)[0].reshape(-1))
        vectors = torch.stack(rows)
        traces[name] = float(((vectors - vectors.mean(0)) ** 2).sum() / (len(rows) - 1))
    return traces


def _settings(name):
    if name in ("reference", "fast"):
        return EngineSettings(name)
    spec = SketchSpec(dim=2 * (VOCAB * VOCAB + 200), blocks=2, seed=1)
    assert all(m > VOCAB * VOCAB and is_prime(m) for m in spec.moduli())  # no two coordinates share a bucket
    return EngineSettings("sketched", sketch_dim=spec.dim, sketch_blocks=spec.blocks, sketch_seed=spec.seed)


@pytest.mark.parametrize("engine", ["reference", "sketched", "fast"])
def test_three_valued_rewards_in_float32_on_a_one_tensor_model_against_explicit_float64_traces(engine):
    """Every estimator's trace within 1e-10 of the explicit computation (float32 weights would be off by ~1e-7;
    the sketch has no collisions, so it is exact), then every forward graph the engine made is already freed (a
    graph kept past its last backward pass holds the activations into the next group's forward pass), and
    ``release`` leaves the statistics without vectors."""
    value = 0.3
    table, logprob_fn, graphs = _bigram()
    result = prompt_traces(logprob_fn, [table], GROUPS, REWARDS, value, est.ALL, _settings(engine))
    explicit = _explicit_traces(value)
    assert min(explicit.values()) > 0
    for name in est.ALL:
        assert result.traces[name] == pytest.approx(explicit[name], rel=1e-10), name
    assert graphs
    for graph in graphs:
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            torch.autograd.grad(graph.sum(), table)
    result.release()
    if engine == "sketched":
        assert all(not (a.running_mean or a.m2 or a.scratch) for a in result.accumulators.values())


@pytest.mark.parametrize("engine", ["reference", "sketched"])
def test_statistics_are_made_on_the_parameters_device(engine):
    """The meta device stands in for a GPU: rewards on the CPU, log-probabilities and parameters on the device;
    every label's running mean and M2 are made there (a group with three reward values, one split by reward)."""
    table = torch.zeros(VOCAB, device="meta", requires_grad=True)

    def logprob_fn(continuations):
        return torch.stack([table[torch.tensor(c)].sum() for c in continuations])

    def weights(group_rewards):  # affine in the rewards, as the fast and sketched engines require
        return {"mean": group_rewards / 3, "centred": group_rewards - group_rewards.mean()}

    work = PromptWork(logprob_fn, [table], GROUPS[:2], REWARDS[:2], ["mean", "centred"], weights)
    stats = load(engine).accumulate(work, _settings(engine))
    vectors = [t for label in work.labels for t in stats[label].running_mean + stats[label].m2]
    assert vectors and {t.device.type for t in vectors} == {"meta"}
