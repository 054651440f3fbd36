"""Exact MSEs of the policy-gradient estimators when the continuation space can be enumerated.

Per prompt x there are n outcomes y_i with probabilities p_i, rewards G_i in {0, 1} and scores
s_i = grad log pi(y_i | x), known only through their Gram matrix Q_ij = <s_i, s_j>. A vector in the
span of the scores is a coefficient vector c (v = sum_i c_i s_i, ||v||^2 = c^T Q c); the true gradient
is g = E[G s], with coefficients p * G. Throughout, E[s] = sum_i p_i s_i = 0 (true for scores).

GRPO is the U-statistic of order 2 with kernel h(z_i, z_j) = 1/2 (G_i - G_j)(s_i - s_j); its first
projection is h1(z) = 1/2 ((G - V) s + g), so zeta1 = tr Var h1 = sigma_O^2 / 4 and
MSE_GRPO = [4 (K - 2) zeta1 + 2 zeta_h] / (K (K - 1)) = sigma_O^2 / K + 2 tr Var(zeta_2) / (K (K - 1)).
Every estimator whose weight w_k depends only on (G_k, C = sum_j G_j) -- all of ``estimators.ALL`` --
is also computed exactly by conditioning on C ~ Binomial(K, V) (``exact_estimator``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from grpo_mse.gradients import estimators as est
from grpo_mse.tables.records import SavedRecord

CLOSED_FORMS = tuple(name for name, e in est.REGISTRY.items() if e.closed_form is not None)  # exact_mse's estimators


@dataclass(frozen=True)
class ExactMoments:
    """The exact moments of one enumerated prompt (``exact_moments``), what the closed-form MSEs read."""

    V: float  # P(reward 1) = E G
    g_sq: float  # ||g||^2, g = E[G s]
    vanilla_m2: float  # E||G s||^2
    oracle_m2: float  # E||(G - V) s||^2
    sigma_o2: float  # sigma_O^2 = oracle_m2 - ||g||^2
    zeta1: float  # sigma_O^2 / 4, the variance of GRPO's first projection
    zeta_h: float  # tr Var h(z_i, z_j) of GRPO's kernel
    var_zeta2: float  # tr Var zeta_2 = zeta_h - sigma_O^2 / 2
    mean_score_sq: float  # ||E s||^2 (0 for the sampled law's score)


@dataclass(frozen=True)
class ExactEstimator:
    """One estimator's exact moments at group size K on an enumerated prompt (``exact_estimator``)."""

    mse: float  # E||X - g||^2 = trace_cov + bias2
    trace_cov: float  # tr Cov X
    bias2: float  # ||E X - g||^2
    mean_coef: np.ndarray  # [n] coefficients of E X in the scores (E X = sum_i mean_coef_i s_i)
    mean_factor: float  # <E X, g> / ||g||^2 (E X = mean_factor * g for the baselined estimators); nan when g = 0


@dataclass(frozen=True, kw_only=True)
class ScalingConstants(SavedRecord):
    """The Theorem-7 constants of a prompt set and the K* they give (``scaling_constants``; the theory JSON's
    ``scaling_constants``)."""

    c1: float  # E_X ||g(X) - E_X g||^2
    c2: float  # E_X sigma_O^2
    c3: float  # 2 E_X tr Var zeta_2
    K_star_exact: float  # 1 + sqrt(c3/c1) (``error_model.k_star``: inf when c1 <= 0 < c3)
    K_star_paper: float  # the paper's sqrt(c3/c1) (inf when c1 <= 0)


def _arrays(p, G, Q) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, G, Q) as float64 arrays of shapes [n], [n], [n, n], validated."""
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    G = np.asarray(G, dtype=np.float64).reshape(-1)
    Q = np.asarray(Q, dtype=np.float64)
    n = p.shape[0]
    if G.shape != (n,) or Q.shape != (n, n):
        raise ValueError(f"need p [n], G [n], Q [n, n]; got {p.shape}, {G.shape}, {Q.shape}")
    if (p < 0).any() or not math.isclose(float(p.sum()), 1.0, rel_tol=0, abs_tol=1e-6):
        raise ValueError("p must be a probability vector")
    return p, G, Q


def quad(a: np.ndarray, Q: np.ndarray, b: np.ndarray | None = None) -> float:
    """<sum_i a_i s_i, sum_j b_j s_j> = a^T Q b (b = a by default)."""
    return float(a @ Q @ (a if b is None else b))


def exact_moments(p, G, Q) -> ExactMoments:
    """V, ||g||^2, E||G s||^2, E||(G-V) s||^2, sigma_O^2, zeta1, zeta_h, tr Var zeta_2 and ||E s||^2."""
    p, G, Q = _arrays(p, G, Q)
    value = float(p @ G)
    diag = np.diag(Q)
    g_sq = quad(p * G, Q)
    oracle_m2 = float(p @ ((G - value) ** 2 * diag))
    sigma_o2 = oracle_m2 - g_sq
    pair_sq = (G[:, None] - G[None, :]) ** 2 * (diag[:, None] + diag[None, :] - 2.0 * Q)
    zeta_h = 0.25 * float(p @ pair_sq @ p) - g_sq
    return ExactMoments(
        V=value,
        g_sq=g_sq,
        vanilla_m2=float(p @ (G**2 * diag)),
        oracle_m2=oracle_m2,
        sigma_o2=sigma_o2,
        zeta1=sigma_o2 / 4.0,
        zeta_h=zeta_h,
        var_zeta2=zeta_h - sigma_o2 / 2.0,
        mean_score_sq=quad(p, Q),
    )


def closed_form_mse(moments: ExactMoments, K: int, name: str) -> float:
    """Exact MSE of estimator ``name`` at group size K from ``exact_moments`` (the registry entry's closed form)."""
    if K < 2:
        raise ValueError("K must be >= 2")
    closed_form = est.get(name).closed_form
    if closed_form is None:
        raise ValueError(f"no closed form for {name!r}; choose from {', '.join(CLOSED_FORMS)}")
    return closed_form(moments, K)


def binomial_pmf(K: int, value: float) -> np.ndarray:
    """P(C = c) for c = 0..K, C ~ Binomial(K, V)."""
    return np.array([math.comb(K, c) * value**c * (1.0 - value) ** (K - c) for c in range(K + 1)])


def pattern_weights(name: str, K: int, count: int, value: float) -> tuple[float, float]:
    """(w for a reward-1 sample, w for a reward-0 sample) of estimator ``name`` when C = ``count``."""
    rewards = torch.tensor([1.0] * count + [0.0] * (K - count), dtype=torch.float64)
    w = est.weights(name, rewards, value)
    return (float(w[0]) if count > 0 else 0.0), (float(w[-1]) if count < K else 0.0)


def _conditional_score(weights: np.ndarray, mass: float, Q: np.ndarray) -> tuple[np.ndarray, float]:
    """(coefficients of E[s | G = b], tr Var(s | G = b)) with weights = p * 1[G = b] and mass = P(G = b)."""
    if mass <= 0.0:
        return np.zeros_like(weights), 0.0
    mean = weights / mass
    return mean, float(weights @ np.diag(Q)) / mass - quad(mean, Q)


def exact_estimator(p, G, Q, K: int, name: str) -> ExactEstimator:
    """E, tr Cov, bias^2 = ||E X - g||^2 and MSE of X = sum_k w(G_k, C) s_k, exactly, given C ~ Bin(K, V).

    Given the reward pattern, the y_k are independent draws from p(. | G_k), so
    E[X | C] = C w1 m1 + (K - C) w0 m0 and E[||X||^2 | C] = ||E[X | C]||^2 + C w1^2 v1 + (K - C) w0^2 v0,
    with m_b = E[s | G = b] and v_b = tr Var(s | G = b). ``mean_factor`` = <E X, g> / ||g||^2 (E X = it * g).
    """
    p, G, Q = _arrays(p, G, Q)
    if not np.isin(G, (0.0, 1.0)).all():
        raise ValueError("exact_estimator needs 0/1 rewards")
    value = float(p @ G)
    m1, v1 = _conditional_score(p * G, value, Q)
    m0, v0 = _conditional_score(p * (1.0 - G), 1.0 - value, Q)
    mean, second = np.zeros_like(p), 0.0
    for count, prob in enumerate(binomial_pmf(K, value)):
        if prob == 0.0:
            continue
        w1, w0 = pattern_weights(name, K, count, value)
        given = count * w1 * m1 + (K - count) * w0 * m0
        mean += prob * given
        second += prob * (quad(given, Q) + count * w1**2 * v1 + (K - count) * w0**2 * v0)
    g = p * G
    trace_cov = second - quad(mean, Q)
    bias2 = quad(mean - g, Q)
    g_sq = quad(g, Q)
    return ExactEstimator(
        mse=trace_cov + bias2,
        trace_cov=trace_cov,
        bias2=bias2,
        mean_coef=mean,
        mean_factor=quad(mean, Q, g) / g_sq if g_sq > 0 else float("nan"),
    )


def exact_mse(p, G, Q, K: int, name: str) -> float:
    """Exact MSE E||X - g||^2 of estimator ``name`` (closed form when there is one, else conditioning on C)."""
    if est.get(name).closed_form is not None:
        return closed_form_mse(exact_moments(p, G, Q), K, name)
    return exact_estimator(p, G, Q, K, name).mse


def gradient_gram(vectors) -> np.ndarray:
    """Gram matrix <g(x_i), g(x_j)> of per-prompt true gradients (flat vectors), in float64."""
    stacked = np.stack([np.asarray(v, dtype=np.float64).reshape(-1) for v in vectors])
    return stacked @ stacked.T


def scaling_constants(g_gram, sigma_o2, var_zeta2, weights=None) -> ScalingConstants:
    """c1 = E_X||g(X) - E_X g||^2, c2 = E_X sigma_O^2, c3 = 2 E_X tr Var zeta_2; K* exact (1 + sqrt(c3/c1))
    and the paper's sqrt(c3/c1) (``error_model.k_star`` / ``error_model.paper_k_star``)."""
    from grpo_mse.analysis.error_model import k_star, paper_k_star

    gram = np.asarray(g_gram, dtype=np.float64)
    count = gram.shape[0]
    w = np.full(count, 1.0 / count) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    c1 = float(w @ np.diag(gram) - w @ gram @ w)
    c2 = float(w @ np.asarray(sigma_o2, dtype=np.float64))
    c3 = 2.0 * float(w @ np.asarray(var_zeta2, dtype=np.float64))
    return ScalingConstants(
        c1=c1,
        c2=c2,
        c3=c3,
        K_star_exact=float(k_star(c1, c3)),
        K_star_paper=float(paper_k_star(c1, c3)) if c1 > 0 else float("inf"),
    )


@dataclass
class OneTokenEnumeration:
    """Exact one-token continuation space of a prompt: p [n], G [n], Q [n, n] and the flat true gradient g."""

    p: np.ndarray
    G: np.ndarray
    Q: np.ndarray
    g: np.ndarray

    def moments(self) -> ExactMoments:
        """``exact_moments`` of this prompt."""
        return exact_moments(self.p, self.G, self.Q)

    def estimator(self, K: int, name: str) -> ExactEstimator:
        """``exact_estimator`` of ``name`` at group size K for this prompt."""
        return exact_estimator(self.p, self.G, self.Q, K, name)


def _jacobian_rows(z: torch.Tensor, params: list[torch.Tensor], rows: range, retain: bool) -> torch.Tensor:
    """[len(rows), P] fp32: d z[r] / d theta for r in ``rows`` (one batched vector-Jacobian product)."""
    seeds = torch.zeros((len(rows), z.shape[0]), dtype=z.dtype, device=z.device)
    seeds[torch.arange(len(rows)), torch.tensor(list(rows))] = 1.0
    grads = torch.autograd.grad(
        z, params, grad_outputs=seeds, is_grads_batched=True, retain_graph=retain, allow_unused=True
    )
    return torch.cat(
        [
            (torch.zeros((len(rows), p.numel()), device=z.device) if d is None else d.reshape(len(rows), -1))
            .float()
            .cpu()
            for d, p in zip(grads, params)
        ],
        dim=1,
    )


def _logit_jacobian(
    model, prompt_ids: list[int], params: list[torch.Tensor], temperature: float, chunk: int = 32
) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """(softmax(z), J, logits) with z = last-position logits / T and J [n, P] = dz / dtheta in fp32."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids)], device=device)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=1).logits[0, -1]
    z = logits.float() / temperature
    n = z.shape[0]
    blocks = [
        _jacobian_rows(z, params, range(start, min(start + chunk, n)), retain=start + chunk < n)
        for start in range(0, n, chunk)
    ]
    return torch.softmax(z.detach().double(), dim=-1).cpu().numpy(), torch.cat(blocks), logits.detach()


def _centred_gram_and_combination(
    jacobian: torch.Tensor, p: np.ndarray, coef: np.ndarray, chunk: int = 1 << 16
) -> tuple[np.ndarray, np.ndarray]:
    """(S S^T, J^T coef) with score rows S = J - 1 (p^T J); fp32 products summed in float64 over column chunks.

    J is itself an fp32 backward result, so fp32 products (relative error ~1e-7 here) lose nothing that matters.
    """
    n, total = jacobian.shape
    gram, combo = torch.zeros((n, n), dtype=torch.float64), torch.empty(total, dtype=torch.float64)
    p32, coef32 = torch.as_tensor(p, dtype=torch.float32), torch.as_tensor(coef, dtype=torch.float32)
    for start in range(0, total, chunk):
        block = jacobian[:, start : start + chunk]
        combo[start : start + chunk] = coef32 @ block
        scores = block - p32 @ block
        gram += (scores @ scores.T).double()
    return gram.numpy(), combo.numpy()


def one_token_enumeration(
    model,
    prompt_ids: list[int],
    reward_fn,
    temperature: float = 1.0,
    top_p: float = 1.0,
    score_distribution: str = "model",
) -> OneTokenEnumeration:
    """Exact sampling law p, G, Q and g for a single generated token over all trainable parameters.

    p = q, the tempered softmax pi_T renormalised on the sampler's top_p nucleus (0 outside; q = pi_T at top_p 1).
    s(y) = J^T (e_y - r) with J = d(logits / T) / dtheta (rows by batched backward passes) and r = pi_T for the
    model's score (``model``) or r = q for the score of the sampled law (``sampling``), hence
    Q = A (J J^T) A^T with A = I - 1 r^T and g = sum_y q_y G_y s(y) = J^T (q * G - V r). E_q[s] = 0 unless
    ``model`` at top_p < 1, where only ``exact_estimator`` (not the closed forms) applies.
    """
    from grpo_mse.policy.sampling import nucleus_mask

    params = [q for q in model.parameters() if q.requires_grad]
    with torch.enable_grad():
        pi, jacobian, logits = _logit_jacobian(model, prompt_ids, params, temperature)
    q = pi * nucleus_mask(logits, temperature, top_p).cpu().numpy()
    q = q / q.sum()
    centre = pi if score_distribution == "model" else q
    G = np.array([float(reward_fn(token)) for token in range(q.shape[0])], dtype=np.float64)
    score_gram, g = _centred_gram_and_combination(jacobian, centre, q * G - float(q @ G) * centre)
    del jacobian
    centring = np.eye(q.shape[0]) - np.outer(np.ones_like(q), centre)  # re-centre: r^T Q = 0 in float64
    return OneTokenEnumeration(p=q, G=G, Q=centring @ score_gram @ centring.T, g=g)
