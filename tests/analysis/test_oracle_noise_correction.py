"""c2 and c3 from a Monte Carlo V (finite n_oracle, every real run) against their exact values (issue 58).

An enumerable prompt: n answers with probabilities p, rewards G in {0, 1} and centred score vectors s_j
(sum_j p_j s_j = 0, the sampled law's score). The oracle estimator uses the table's V_hat ~ Binomial(n_oracle, V) /
n_oracle in place of V; at a fixed V_hat its exact trace over groups is
    tr_oracle(V_hat) = (sum_j p_j (G_j - V_hat)^2 ||s_j||^2 - ||g||^2) / K,
which exceeds the exact-V trace by (V_hat - V)^2 tr Cov(s_bar) on average over V_hat. The run records
oracle_noise = V_hat (1 - V_hat) / (n_oracle - 1) tr Cov(s_bar) (unbiased for that excess), and per_prompt_constants
subtracts it: averaged over every outcome of V_hat, c2 and c3 then equal the exact sigma_O^2 and 2 tr Var zeta_2
(studies.exact.theory), with no sampling noise. Without the correction c3 is short by about
K (K - 1) Var(V_hat) tr Cov(s_bar), which this test sees at n_oracle = 8.
"""

import math

import numpy as np
import pytest

from grpo_mse.analysis.error_model import per_prompt_constants
from grpo_mse.gradients.estimators import GRPO, ORACLE
from grpo_mse.tables.records import PromptRecord
from studies.exact import theory


def _prompt(seed: int):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(6))
    G = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    scores = rng.normal(size=(6, 4))
    scores -= p @ scores  # E s = 0
    return p, G, scores @ scores.T


def _record(K: int, tr_oracle: float, tr_grpo: float, noise: float) -> PromptRecord:
    return PromptRecord(
        K=K, prompt_index=0, id=0, prompt="x", gold=1, V_oracle=0.5, mean_reward=0.5,
        tr_cov={ORACLE: tr_oracle, GRPO: tr_grpo}, oracle_noise=noise,
    )  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("K", [2, 4])
@pytest.mark.parametrize("n_oracle", [8, 64])
def test_monte_carlo_v_with_its_noise_correction_gives_the_exact_c2_and_c3(seed, K, n_oracle):
    p, G, Q = _prompt(seed)
    moments = theory.exact_moments(p, G, Q)
    value, diag = moments.V, np.diag(Q)
    tr_grpo = theory.exact_estimator(p, G, Q, K, GRPO).trace_cov  # GRPO's baseline does not use V
    score_bar_trace = float(p @ diag) / K  # tr Cov(s_bar) with E s = 0
    mean_c2 = mean_c3 = mean_uncorrected_c3 = 0.0
    for count in range(n_oracle + 1):
        chance = math.comb(n_oracle, count) * value**count * (1 - value) ** (n_oracle - count)
        v_hat = count / n_oracle
        tr_oracle = (float(p @ ((G - v_hat) ** 2 * diag)) - moments.g_sq) / K
        noise = v_hat * (1 - v_hat) / (n_oracle - 1) * score_bar_trace
        c2, c3 = per_prompt_constants(_record(K, tr_oracle, tr_grpo, noise))
        mean_c2 += chance * c2
        mean_c3 += chance * c3
        mean_uncorrected_c3 += chance * K * (K - 1) * (tr_grpo - tr_oracle)
    assert mean_c2 == pytest.approx(moments.sigma_o2, rel=1e-10)
    assert mean_c3 == pytest.approx(2 * moments.var_zeta2, rel=1e-10)
    # the size of what the correction removes: the uncorrected c3 is short by K (K - 1) Var(V_hat) tr Cov(s_bar)
    short = K * (K - 1) * value * (1 - value) / n_oracle * score_bar_trace
    assert mean_c3 - mean_uncorrected_c3 == pytest.approx(short, rel=1e-10)
    assert short > 0.01 * mean_c3  # 1.4% to 36% here


def test_an_exact_v_has_no_correction():
    """n_oracle null: oracle_noise 0 (or missing, None) and c2, c3 from the traces as they are."""
    for noise in (0.0, None):
        assert per_prompt_constants(_record(4, 0.5, 0.75, noise)) == (2.0, 3.0)
