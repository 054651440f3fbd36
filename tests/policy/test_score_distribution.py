"""Exactness at top_p < 1 on a two-token enumerable case, for both score settings.

A small random LM, temperature 0.8, top_p 0.7, at most two new tokens, EOS = the most likely first token (so a
continuation is [EOS] or [a, b], b possibly EOS). The sampled law is q(y) = prod_t pi_T(y_t) 1[y_t in N_t] /
pi_T(N_t), nucleus N_t recomputed here in float64 by sorting. Enumerating every y with q(y) > 0 gives exact
log q, exact scores (autograd per sequence) and E_q[s]: 0 for the score of q ("sampling"), not 0 for the score
of the untruncated pi_T ("model"). The pipeline (logprobs with and without the final EOS, sampler, engine,
job.score_fields) must agree: exactly for log-probabilities, within Monte Carlo error for the estimates.
"""

import math

import numpy as np
import pytest
import torch

from grpo_mse.gradients.engine import prompt_traces
from grpo_mse.gradients.trace_engines import EngineSettings
from grpo_mse.policy.logprobs import sequence_logprobs, shared_prompt_logprobs
from grpo_mse.policy.sampling import HFSampler, SamplingSettings
from grpo_mse.runs.tracecov import score_fields
from studies.exact import theory

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)

PROMPT, TEMPERATURE, TOP_P, K, M, COPIES = [5, 6, 7], 0.8, 0.7, 4, 8, 24
Z = 4.0


def _step_laws(model, prefix):
    """(log pi_T, log q) over the vocabulary after ``prefix`` in float64; log q = -inf outside the nucleus."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prefix])).logits[0, -1].double() / TEMPERATURE
    log_pi = torch.log_softmax(logits, -1)
    probs = log_pi.exp()
    order = torch.argsort(probs, descending=True)
    before = torch.cumsum(probs[order], 0) - probs[order]
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order[before < TOP_P]] = True
    log_q = torch.where(keep, log_pi - torch.logsumexp(log_pi[keep], 0), torch.tensor(-math.inf, dtype=torch.float64))
    return log_pi, log_q


def _reward(tokens, eos):
    """1 when the sum of the non-EOS tokens is even."""
    return float(sum(t for t in tokens if t != eos) % 2 == 0)


def _manual_logprob(model, tokens, kind, eos, include_eos=True):
    """Differentiable sum over the tokens of log pi_T or log q, from one full forward pass (fp32 model)."""
    ids = torch.tensor([PROMPT + tokens])
    logits = model(input_ids=ids).logits[0, len(PROMPT) - 1 : -1] / TEMPERATURE
    total = torch.zeros(())
    for step, token in enumerate(tokens):
        if token == eos and not include_eos:
            continue
        log_pi = torch.log_softmax(logits[step], -1)
        if kind == "sampling":
            keep = torch.isfinite(_step_laws(model, PROMPT + tokens[:step])[1])
            log_pi = log_pi - torch.logsumexp(log_pi[keep], 0)
        total = total + log_pi[token]
    return total


@pytest.fixture(scope="module")
def case(random_lm):
    model = random_lm
    first_pi, first_q = _step_laws(model, PROMPT)
    eos = int(torch.argmax(first_pi))
    outcomes = []
    for a in torch.nonzero(torch.isfinite(first_q)).flatten().tolist():
        if a == eos:
            outcomes.append(([a], float(first_q[a])))
            continue
        second_q = _step_laws(model, PROMPT + [a])[1]
        support = torch.nonzero(torch.isfinite(second_q)).flatten().tolist()
        outcomes += [([a, b], float(first_q[a] + second_q[b])) for b in support]
    tokens = [t for t, _ in outcomes]
    q = np.exp([lq for _, lq in outcomes])
    G = np.array([_reward(t, eos) for t in tokens])
    params = [p for p in model.parameters() if p.requires_grad]
    scores = {}
    for kind in ("model", "sampling"):
        rows = []
        for t in tokens:
            grads = torch.autograd.grad(_manual_logprob(model, t, kind, eos), params)
            rows.append(torch.cat([g.reshape(-1) for g in grads]).double().numpy())
        scores[kind] = np.stack(rows)
    return {"model": model, "eos": eos, "tokens": tokens, "q": q, "G": G, "scores": scores, "params": params}


def test_enumeration_covers_eos_and_truncation(case):
    q, tokens, eos = case["q"], case["tokens"], case["eos"]
    assert q.sum() == pytest.approx(1.0, abs=1e-9)
    assert [eos] in tokens and any(len(t) == 2 and t[1] == eos for t in tokens)
    assert len({t[0] for t in tokens}) < case["model"].config.vocab_size  # the nucleus truncates
    assert 0.2 < float(q @ case["G"]) < 0.8


@pytest.mark.parametrize("include_eos", [True, False])
def test_pipeline_logprobs_are_log_q_or_log_pi(case, include_eos):
    """sequence_logprobs and shared_prompt_logprobs give log q at top_p (log pi_T at 1), EOS masked or not."""
    model, eos, tokens = case["model"], case["eos"], case["tokens"]
    for kind, top_p in (("sampling", TOP_P), ("model", 1.0)):
        manual = torch.stack([_manual_logprob(model, t, kind, eos, include_eos) for t in tokens]).detach()
        for function in (sequence_logprobs, shared_prompt_logprobs):
            got = function(
                model,
                PROMPT,
                tokens,
                eos_ids=[eos],
                pad_id=0,
                include_eos=include_eos,
                temperature=TEMPERATURE,
                top_p=top_p,
            ).detach()
            assert torch.allclose(got, manual.float(), atol=2e-5), (kind, function.__name__)


def test_sampler_draws_from_q(case):
    """Every sampled continuation has q > 0 and the share of an immediate EOS matches q([EOS])."""
    support = {tuple(t): p for t, p in zip(case["tokens"], case["q"])}
    n = 600
    (draws,) = _sampler(case["model"], case["eos"], 200).sample([(PROMPT, n, (1,))])
    assert all(tuple(d) in support for d in draws)
    p = support[(case["eos"],)]
    share = sum(d == [case["eos"]] for d in draws) / n
    assert abs(share - p) < Z * math.sqrt(p * (1 - p) / n)


def _sampler(model, eos, batch_size):
    """The seeded sampler at (TEMPERATURE, TOP_P), at most two new tokens, stopping at ``eos``."""
    settings = SamplingSettings(eos_ids=(eos,), pad_id=0, temperature=TEMPERATURE, top_p=TOP_P, max_new_tokens=2)
    return HFSampler(model, settings, batch_size)


def _logprob_fn(model, eos, top_p):
    """The engine's log-probability function for continuations of PROMPT (law q at top_p < 1, pi at top_p = 1)."""

    def logprob_fn(continuations):
        return shared_prompt_logprobs(
            model, PROMPT, continuations, eos_ids=[eos], pad_id=0, temperature=TEMPERATURE, top_p=top_p
        )

    return logprob_fn


def _sampled_groups(model, eos, seed, copy):
    """M groups of K two-token continuations of PROMPT sampled at (TEMPERATURE, TOP_P), and their rewards."""
    (draws,) = _sampler(model, eos, M * K).sample([(PROMPT, M * K, (seed, copy))])
    groups = [draws[g * K : (g + 1) * K] for g in range(M)]
    rewards = torch.tensor([[_reward(t, eos) for t in group] for group in groups], dtype=torch.float64)
    return groups, rewards


def _exact(case, kind):
    s = case["scores"][kind]
    mean = case["q"] @ s
    gram = s @ s.T
    trace = {n: theory.exact_estimator(case["q"], case["G"], gram, K, n).trace_cov for n in ("grpo", "oracleV")}
    return float(mean @ mean), float(case["q"] @ np.einsum("ij,ij->i", s, s)), trace


def test_exact_mean_score(case):
    """E_q[grad log q] = 0; E_q[grad log pi_T] is not 0 under truncation."""
    sampling, second_sampling, _ = _exact(case, "sampling")
    model, second_model, _ = _exact(case, "model")
    assert sampling < 1e-9 * second_sampling
    assert model > 1e-3 * second_model


@pytest.mark.parametrize("kind", ["model", "sampling"])
def test_engine_mean_score_and_traces_match_enumeration(case, kind):
    """Per copy of the prompt: job.score_fields' ||E s||^2 and the GRPO / oracle traces; |z| < 4 across copies."""
    model, eos, params = case["model"], case["eos"], case["params"]
    value = float(case["q"] @ case["G"])
    exact_sq, _, exact_traces = _exact(case, kind)
    top_p = TOP_P if kind == "sampling" else 1.0

    logprob_fn = _logprob_fn(model, eos, top_p)

    values = {"mean_score_sq": [], "grpo": [], "oracleV": []}
    for copy in range(COPIES):
        groups, rewards = _sampled_groups(model, eos, 7, copy)
        stats = prompt_traces(
            logprob_fn, params, groups, rewards, value, ("grpo", "oracleV"), EngineSettings(measure_score=True)
        )
        values["mean_score_sq"].append(score_fields(stats, {"V_oracle": value})["mean_score_sq"])
        for name in ("grpo", "oracleV"):
            values[name].append(stats.traces[name])
    targets = {"mean_score_sq": exact_sq, **exact_traces}
    for name, measured in values.items():
        measured = np.array(measured)
        se = measured.std(ddof=1) / math.sqrt(len(measured))
        assert abs(measured.mean() - targets[name]) < Z * se, (kind, name, measured.mean(), targets[name], se)


@pytest.mark.parametrize("kind", ["model", "sampling"])
def test_one_token_enumeration_at_top_p(case, kind):
    """theory.one_token_enumeration at top_p < 1: p = q on the nucleus, Q and g from explicit per-token scores."""
    model, params = case["model"], case["params"]
    rewards = np.array([float(y % 3 == 0) for y in range(model.config.vocab_size)])
    enum = theory.one_token_enumeration(model, PROMPT, lambda y: rewards[y], TEMPERATURE, TOP_P, kind)
    log_q = _step_laws(model, PROMPT)[1].numpy()
    np.testing.assert_allclose(enum.p, np.exp(log_q), atol=1e-6)
    support = np.nonzero(np.isfinite(log_q))[0]
    rows = []
    for y in support:  # one-token sequences; eos only marks where sampling would stop
        grads = torch.autograd.grad(_manual_logprob(model, [int(y)], kind, eos=-1), params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]).double().numpy())
    scores = np.stack(rows)
    np.testing.assert_allclose(enum.Q[np.ix_(support, support)], scores @ scores.T, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(enum.g, (enum.p[support] * rewards[support]) @ scores, rtol=1e-4, atol=1e-6)


def test_std_grpo_bias_against_its_own_target(case):
    """Sampled law's score: the engine's bias^2 of std-GRPO against g / sqrt(V (1 - V)) (job.score_fields) agrees
    with the exact ||E x_std - g / sqrt(V (1 - V))||^2 (which differs from its bias^2 against g)."""
    model, eos, params, q, G = case["model"], case["eos"], case["params"], case["q"], case["G"]
    value = float(q @ G)
    s = case["scores"]["sampling"]
    gram = s @ s.T
    exact = theory.exact_estimator(q, G, gram, K, "grpo_std")
    own = exact.mean_coef - q * G / math.sqrt(value * (1 - value))
    exact_own = float(own @ gram @ own)

    logprob_fn = _logprob_fn(model, eos, TOP_P)

    measured = []
    for copy in range(COPIES):
        groups, rewards = _sampled_groups(model, eos, 11, copy)
        stats = prompt_traces(logprob_fn, params, groups, rewards, value, ("grpo_std", "oracleV"))
        fields = score_fields(stats, {"V_oracle": value})
        bias2_own = fields["bias2_own"]["grpo_std"]
        assert fields["mse_own"]["grpo_std"] == pytest.approx(stats.traces["grpo_std"] + bias2_own)
        measured.append(bias2_own)
    measured = np.array(measured)
    se = measured.std(ddof=1) / math.sqrt(len(measured))
    assert abs(measured.mean() - exact_own) < Z * se, (measured.mean(), exact_own, se)
    # the two targets differ exactly; this Monte Carlo size cannot tell them apart (s.e. ~ their difference)
    assert abs(exact.bias2 - exact_own) > 0.5 * exact_own
