"""End-to-end exactness on the built-in policy: with ONE generated token, temperature 1 and top_p 1, a
prompt's continuation space is the vocabulary, so every estimator's exact trace of covariance is known
(studies.exact.theory). The real pipeline (run_tracecov.py -> tracecov_job.evaluate_prompt -> engine) must
agree with it within its Monte Carlo interval, and the estimators' mean gradients must match E[X]."""

import json
import math
import os

import numpy as np
import pytest
import torch
from conftest import BUILTIN_POLICY, one_token_sampler, tracecov_argv

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.commands import tracecov as tracecov_command
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import prompt_traces
from grpo_mse.gradients.trace_engines import EngineSettings
from grpo_mse.rewards.rules import last_integer, last_integer_reward
from grpo_mse.tables.inputs import prompt_ids
from studies.exact import theory
from studies.exact.one_token import token_texts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists(os.path.join(BUILTIN_POLICY, "model.safetensors")),
        reason="assets/tiny_policy/model.safetensors not built (built-in policy missing)",
    ),
]

K_LIST = (2, 4)
COPIES, GROUPS = 32, 8  # T copies of one prompt, M groups per copy
# The per-copy traces are skewed, so the t-statistic has heavy tails: simulating this exact setup from the
# enumeration gave P(|t| > 3) up to ~1.2% per check (~5% over the ten checks) but P(|t| > 4) <= 0.1%.
Z = 4.0


@torch.no_grad()
def _choose_prompt(model, tokenizer) -> tuple[dict, int, float]:
    """(row, gold, V) with V = P(last integer of the one-token continuation == gold) closest to 1/2.

    Gold is chosen among the integers decoded from single tokens (digits: the Qwen2 split keeps each
    digit a token), over the first 20 zero-shot rows, so that the exact V is far from 0 and 1.
    """
    best = None
    for row in make_rows(20, seed=0, style="zero_shot"):
        ids = torch.tensor([prompt_ids(tokenizer, row["prompt"])])
        probs = torch.softmax(model(input_ids=ids, logits_to_keep=1).logits[0, -1].double(), -1).numpy()
        values = [last_integer(t) for t in token_texts(tokenizer, probs.shape[0])]
        for gold in sorted({v for v in values if v is not None}):
            v = float(sum(q for q, value in zip(probs, values) if value == gold))
            if best is None or abs(v - 0.5) < abs(best[2] - 0.5):
                best = (row, gold, v)
    return best


def _build_case(model, tokenizer) -> dict:
    """The chosen prompt's oracle row, its exact enumeration and exact estimator moments, and a sampler."""
    row, gold, _ = _choose_prompt(model, tokenizer)
    texts = token_texts(tokenizer, model.config.vocab_size)
    enum = theory.one_token_enumeration(
        model, prompt_ids(tokenizer, row["prompt"]), lambda token: last_integer_reward(texts[token], gold)
    )
    value = float(enum.p @ enum.G)
    assert 0.2 < value < 0.8, f"no prompt with a non-degenerate one-token V (best {value:.3f})"
    sampler = one_token_sampler(model, tokenizer)
    return {
        "row": {**row, "ground_truth": gold, "V_oracle": value},
        "enum": enum,
        "value": value,
        "exact": {k: {n: enum.estimator(k, n) for n in est.ALL} for k in K_LIST},
        "sampler": sampler,
    }


@pytest.fixture(scope="module")
def case():
    from grpo_mse.policy.loading import load_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small kernels: one thread is as fast, and much faster on a busy machine
    try:
        yield _build_case(*load_policy(BUILTIN_POLICY, "cpu", "fp32"))
    finally:
        torch.set_num_threads(threads)


def test_enumeration_is_consistent(case):
    enum = case["enum"]
    moments = enum.moments()
    assert abs(moments.mean_score_sq) < 1e-12 * np.trace(enum.Q)
    assert float(enum.g @ enum.g) == pytest.approx(moments.g_sq, rel=1e-4)
    for k in K_LIST:
        for name in theory.CLOSED_FORMS:
            assert case["exact"][k][name].mse == pytest.approx(
                theory.exact_mse(enum.p, enum.G, enum.Q, k, name), rel=1e-8
            )


def _run_tracecov(table, out_dir):
    script = tracecov_command
    options = dict(seed=0, T=COPIES, M=GROUPS, K_list=K_LIST, temperature="1.0", top_p="1.0", max_new_tokens=1)
    script.main(tracecov_argv(table, out_dir, "--no_advisor", **options, gen_bs=64, estimators=est.ALL))


def test_pipeline_traces_match_exact_values(case, tmp_path):
    """T copies of the same prompt under different ids: i.i.d. per-copy traces, so mean +- Z s.e. covers tr Cov.

    (The per-copy squared-bias estimates of the biased estimators are too heavy-tailed for such an interval;
    their means are checked exactly in ``test_mean_gradients_match_exact_expectation``.)
    """
    table = tmp_path / "oracle.jsonl"
    table.write_text("".join(json.dumps({**case["row"], "id": 1000 + i}) + "\n" for i in range(COPIES)))
    _run_tracecov(str(table), str(tmp_path))
    for k in K_LIST:
        [detailed] = tmp_path.glob(f"tracecov_*_K{k}_detailed.json")
        records = json.loads(detailed.read_text())["prompt_results"]
        assert len(records) == COPIES
        for name in est.ALL:
            traces = np.array([r["tr_cov"][name] for r in records])
            mean, se = traces.mean(), traces.std(ddof=1) / math.sqrt(COPIES)
            exact = case["exact"][k][name].trace_cov
            assert abs(mean - exact) < Z * se, f"K={k} {name}: {mean:.4g} +- {se:.2g} vs exact {exact:.4g}"
        assert all(set(r["bias2"]) == set(est.BIASED) for r in records)


def test_mean_gradients_match_exact_expectation(case):
    """||mean_m X_m - E X||^2 has mean tr Cov / M; E X = g (unbiased), (K-1)/K g (Dr.GRPO), kappa g (std).

    Bound 9 tr Cov / M: in the worst case (a rank-one covariance) the statistic is chi-square with one
    degree of freedom, P(> 9) = 0.27%; a bound of 4 fails ~5% of the time for the vanilla estimator.
    """
    sampler, row, enum = case["sampler"], case["row"], case["enum"]
    k, m = 4, 128
    ids, continuations, texts = sampler.draw(row, (k, 7), m * k)
    rewards = torch.tensor([last_integer_reward(t, row["ground_truth"]) for t in texts]).view(m, k)
    params = [p for p in sampler.model.parameters() if p.requires_grad]
    groups = [continuations[i * k : (i + 1) * k] for i in range(m)]
    stats = prompt_traces(
        sampler.logprob_fn(ids), params, groups, rewards, case["value"], est.ALL, EngineSettings("fast")
    )
    for name in est.ALL:
        exact = case["exact"][k][name]
        mean = torch.cat([t.reshape(-1) for t in stats.accumulators[name].mean()]).double().numpy()
        error = float(((mean - exact.mean_factor * enum.g) ** 2).sum())
        assert error < 9 * exact.trace_cov / m, f"{name}: ||mean - E X||^2 = {error:.3g}"
    shrunk = np.array([case["exact"][k][n].mean_factor for n in ("drgrpo", "naive", "grpo")])
    assert shrunk == pytest.approx([(k - 1) / k, 1.0, 1.0], rel=1e-9)


def test_bias_estimates_match_exact_bias(case):
    """The engine's bias^2 estimate (||mean d||^2 - tr Cov(d) / M, d = x_e - x_oracle on the same samples) is
    unbiased for the exact ||E X_e - g||^2: Dr.GRPO's is ||g / K||^2 (E X = (K-1)/K g), std-GRPO's comes from
    enumeration. Standard error bound: Var(||mean d||^2) <= 4 ||E d||^2 tr S / M + 2 (tr S)^2 / M^2 (S = Cov d,
    mu^T S mu <= ||mu||^2 tr S, tr S^2 <= (tr S)^2), at the estimated quantities; |z| < 4 as above.
    Power: the same intervals must exclude 0, so "unbiased" would fail."""
    from grpo_mse.gradients.engine import bias_label

    sampler, row, enum = case["sampler"], case["row"], case["enum"]
    params = [p for p in sampler.model.parameters() if p.requires_grad]
    g_sq, m = float(enum.g @ enum.g), 256
    # each at the K where its bias is largest relative to the noise: Dr.GRPO's shrinks like 1/K^2, std-GRPO's grows
    for name, k in (("drgrpo", 2), ("grpo_std", 4)):
        ids, continuations, texts = sampler.draw(row, (k, 11), m * k)
        rewards = torch.tensor([last_integer_reward(t, row["ground_truth"]) for t in texts]).view(m, k)
        groups = [continuations[i * k : (i + 1) * k] for i in range(m)]
        stats = prompt_traces(
            sampler.logprob_fn(ids), params, groups, rewards, case["value"], [name], EngineSettings("fast")
        )
        exact = case["exact"][k][name].bias2
        if name == "drgrpo":
            assert exact == pytest.approx(g_sq / k**2, rel=1e-6)
        estimate = stats.bias2[name]
        spread = stats.accumulators[bias_label(name)].trace()
        se = math.sqrt(4 * max(estimate, 0.0) * spread / m + 2 * spread**2 / m**2)
        assert abs(estimate - exact) < Z * se, f"{name}: bias^2 {estimate:.4g} +- {se:.2g} vs exact {exact:.4g}"
        assert estimate > Z * se, f"{name}: bias^2 {estimate:.4g} not distinguishable from 0 (se {se:.2g})"
