"""Exact MSE formulas of studies.exact.theory against brute-force enumeration of all K-tuples and Monte Carlo."""

import itertools
import math

import numpy as np
import pytest
import torch

from grpo_mse.gradients import estimators as est
from studies.exact import theory


def _case(seed: int, rewards=(1.0, 0.0, 1.0, 0.0), dim: int = 5):
    """Random p, the given 0/1 rewards and scores s_i in R^dim centred so that sum_i p_i s_i = 0."""
    rng = np.random.default_rng(seed)
    G = np.array(rewards, dtype=np.float64)
    p = rng.dirichlet(np.ones(G.shape[0]))
    raw = rng.normal(size=(G.shape[0], dim))
    scores = raw - p @ raw
    return p, G, scores @ scores.T, scores


def _brute_force(p, G, scores, K, name):
    """E X (as coefficients over the outcomes), tr Cov X and E||X - g||^2 over all n^K tuples."""
    n, value, g = p.shape[0], float(p @ G), (p * G) @ scores
    mean_coef, second, mse = np.zeros(n), 0.0, 0.0
    for tup in itertools.product(range(n), repeat=K):
        prob = float(np.prod(p[list(tup)]))
        w = est.weights(name, torch.tensor(G[list(tup)], dtype=torch.float64), value).numpy()
        x = w @ scores[list(tup)]
        np.add.at(mean_coef, list(tup), prob * w)
        second += prob * float(x @ x)
        mse += prob * float((x - g) @ (x - g))
    mean = mean_coef @ scores
    return mean_coef, second - float(mean @ mean), mse


CASES = [(0, (1.0, 0.0, 1.0, 0.0)), (1, (0.0, 1.0, 0.0)), (2, (1.0, 1.0, 1.0, 0.0)), (3, (1.0, 0.0, 0.0, 0.0))]


@pytest.mark.parametrize("seed,rewards", CASES)
@pytest.mark.parametrize("K", [2, 3, 4])
@pytest.mark.parametrize("name", est.ALL)
def test_exact_equals_brute_force(seed, rewards, K, name):
    p, G, Q, scores = _case(seed, rewards)
    mean_coef, trace_cov, mse = _brute_force(p, G, scores, K, name)
    exact = theory.exact_estimator(p, G, Q, K, name)
    assert exact.mse == pytest.approx(mse, rel=1e-10, abs=1e-13)
    assert exact.trace_cov == pytest.approx(trace_cov, rel=1e-10, abs=1e-13)
    np.testing.assert_allclose(exact.mean_coef, mean_coef, rtol=1e-10, atol=1e-13)
    assert theory.exact_mse(p, G, Q, K, name) == pytest.approx(mse, rel=1e-10, abs=1e-13)
    closed_form = est.REGISTRY[name].closed_form
    if closed_form is not None:  # the registry's formula itself, not via exact_mse
        assert closed_form(theory.exact_moments(p, G, Q), K) == pytest.approx(mse, rel=1e-10, abs=1e-13)
    assert (exact.bias2 > 1e-9) == est.REGISTRY[name].biased  # the registry's bias flag is the truth
    if name in est.UNBIASED:
        assert exact.bias2 == pytest.approx(0.0, abs=1e-12)
        np.testing.assert_allclose(mean_coef @ scores, (p * G) @ scores, atol=1e-12)


@pytest.mark.parametrize("seed,rewards", CASES)
def test_hoeffding_quantities_by_brute_force(seed, rewards):
    """zeta_h = tr Var h, tr Var zeta_2 and sigma_O^2 from explicit sums over outcomes and pairs."""
    p, G, Q, s = _case(seed, rewards)
    value, g = float(p @ G), (p * G) @ s
    h1 = 0.5 * ((G - value)[:, None] * s + g)
    n = p.shape[0]
    var_h = var_z2 = 0.0
    for i, j in itertools.product(range(n), repeat=2):
        h = 0.5 * (G[i] - G[j]) * (s[i] - s[j])
        z2 = h - h1[i] - h1[j] + g
        var_h += p[i] * p[j] * float((h - g) @ (h - g))
        var_z2 += p[i] * p[j] * float(z2 @ z2)
    moments = theory.exact_moments(p, G, Q)
    assert moments.zeta_h == pytest.approx(var_h, rel=1e-12)
    assert moments.var_zeta2 == pytest.approx(var_z2, rel=1e-10, abs=1e-14)
    assert moments.zeta1 == pytest.approx(float(p @ ((h1 - g) ** 2).sum(1)), rel=1e-12)
    assert moments.sigma_o2 == pytest.approx(4 * moments.zeta1, rel=1e-12)
    assert moments.mean_score_sq == pytest.approx(0.0, abs=1e-12)
    for k in (2, 3, 8):
        gap = theory.exact_mse(p, G, Q, k, "grpo") - theory.exact_mse(p, G, Q, k, "oracleV")
        assert gap == pytest.approx(2 * moments.var_zeta2 / (k * (k - 1)), rel=1e-10)  # the U-statistic gap


@pytest.mark.parametrize("K", [2, 3, 4, 7, 16])
def test_drgrpo_mean_is_shrunk_gradient(K):
    p, G, Q, scores = _case(4)
    exact = theory.exact_estimator(p, G, Q, K, "drgrpo")
    np.testing.assert_allclose(exact.mean_coef @ scores, (K - 1) / K * (p * G) @ scores, rtol=1e-12, atol=1e-14)
    assert exact.mean_factor == pytest.approx((K - 1) / K, rel=1e-12)
    assert exact.bias2 == pytest.approx(theory.quad(p * G, Q) / K**2, rel=1e-10)
    if K <= 4:
        mean_coef, _, _ = _brute_force(p, G, scores, K, "drgrpo")
        np.testing.assert_allclose(mean_coef @ scores, (K - 1) / K * (p * G) @ scores, rtol=1e-12, atol=1e-14)


def test_the_closed_forms_are_the_registry_entries_with_one():
    assert theory.CLOSED_FORMS == ("naive", "grpo", "oracleV", "drgrpo")  # std-normalised GRPO: by conditioning only


def test_closed_forms_equal_conditioning_for_large_K():
    p, G, Q, _ = _case(5)
    for k in (5, 16, 64):
        for name in theory.CLOSED_FORMS:
            assert theory.exact_mse(p, G, Q, k, name) == pytest.approx(
                theory.exact_estimator(p, G, Q, k, name).mse, rel=1e-9
            )
    curves = {n: np.array([theory.exact_mse(p, G, Q, k, n) for k in (2, 4, 8, 64)]) for n in ("grpo", "oracleV")}
    assert np.all(np.diff(curves["grpo"]) < 0) and np.all(curves["oracleV"] <= curves["grpo"] + 1e-15)
    assert curves["grpo"][-1] / curves["oracleV"][-1] == pytest.approx(1.0, abs=0.05)


def test_closed_form_mse_refuses_what_it_cannot_give():
    moments = theory.exact_moments(*_case(5)[:3])
    with pytest.raises(ValueError, match="no closed form for 'grpo_std'"):
        theory.closed_form_mse(moments, 4, "grpo_std")
    with pytest.raises(ValueError, match="K must be >= 2"):
        theory.closed_form_mse(moments, 1, "grpo")


def test_degenerate_rewards_give_zero_gradient():
    p, _, Q, _ = _case(6)
    for G in (np.zeros(4), np.ones(4)):
        assert theory.exact_mse(p, G, Q, 4, "grpo") == pytest.approx(0.0, abs=1e-12)
        assert theory.exact_estimator(p, G, Q, 4, "grpo_std").mse == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("K", [2, 4])
def test_monte_carlo_agrees_with_exact(K):
    """Many simulated groups: the mean squared error (and tr Cov) match the exact values within 4 s.e."""
    p, G, Q, scores = _case(7, (1.0, 0.0, 0.0, 1.0, 0.0))
    groups = 100_000
    rng = np.random.default_rng(100 + K)
    draws = rng.choice(p.shape[0], size=(groups, K), p=p)
    rewards = torch.tensor(G[draws])
    g = (p * G) @ scores
    for name in est.ALL:
        w = est.weights(name, rewards, float(p @ G)).numpy()
        x = np.einsum("mk,mkd->md", w, scores[draws])
        err = ((x - g) ** 2).sum(1)
        exact = theory.exact_estimator(p, G, Q, K, name)
        se = err.std(ddof=1) / math.sqrt(groups)
        assert abs(err.mean() - exact.mse) < 4 * se, name
        mean = x.mean(0)
        assert float(((mean - exact.mean_coef @ scores) ** 2).sum()) < 16 * exact.trace_cov / groups, name


def test_scaling_constants():
    rng = np.random.default_rng(8)
    grads = rng.normal(size=(6, 10))
    sigma, var2 = rng.uniform(1, 2, 6), rng.uniform(0.1, 0.5, 6)
    c = theory.scaling_constants(theory.gradient_gram(grads), sigma, var2)
    assert c.c1 == pytest.approx(float(((grads - grads.mean(0)) ** 2).sum(1).mean()), rel=1e-12)
    assert c.c2 == pytest.approx(sigma.mean()) and c.c3 == pytest.approx(2 * var2.mean())
    assert c.K_star_paper == pytest.approx(math.sqrt(c.c3 / c.c1))
    assert c.K_star_exact == pytest.approx(1 + math.sqrt(c.c3 / c.c1))
    same = theory.scaling_constants(np.ones((3, 3)), [1, 1, 1], [1, 1, 1])
    assert same.c1 == pytest.approx(0.0, abs=1e-15) and same.K_star_exact == float("inf")


@pytest.mark.slow
def test_one_token_enumeration_matches_explicit_scores(random_lm):
    """Q and g from the logit Jacobian equal those of explicit per-token backward passes of log pi(y|x)."""
    from grpo_mse.policy.logprobs import sequence_logprobs

    prompt, temperature = [3, 9, 4, 17, 5], 0.7
    params = list(random_lm.parameters())
    enum = theory.one_token_enumeration(random_lm, prompt, lambda token: float(token % 3 == 0), temperature)
    n = enum.p.shape[0]
    scores = []
    for token in range(n):
        lp = sequence_logprobs(random_lm, prompt, [[token]], eos_ids=[1], pad_id=0, temperature=temperature)
        grads = torch.autograd.grad(lp.sum(), params)
        scores.append(torch.cat([d.reshape(-1) for d in grads]).double().numpy())
        if token == 0:
            assert float(lp.detach().exp()) == pytest.approx(enum.p[0], rel=1e-5)
    scores = np.stack(scores)
    np.testing.assert_allclose(enum.G, [float(t % 3 == 0) for t in range(n)])
    np.testing.assert_allclose(enum.Q, scores @ scores.T, rtol=1e-4, atol=1e-6 * np.abs(enum.Q).max())
    np.testing.assert_allclose(enum.g, (enum.p * enum.G) @ scores, atol=1e-5 * np.abs(enum.g).max())
    assert enum.moments().mean_score_sq == pytest.approx(0.0, abs=1e-12 * np.trace(enum.Q))
    assert enum.estimator(4, "grpo").mse == pytest.approx(theory.exact_mse(enum.p, enum.G, enum.Q, 4, "grpo"))
