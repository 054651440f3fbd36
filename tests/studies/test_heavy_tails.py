"""The heavy-tail study's simulated traces (studies.advisor.heavy_tails, weights from the estimator registry)
against the exact MSEs of studies.exact.theory: a plausible slip in the weights (GRPO's K-1, the oracle's V, a
missing 1/K) moves a mean trace by far more than the Monte Carlo error allowed here."""

import numpy as np
import pytest

from studies.advisor import heavy_tails
from studies.exact import theory

HEAVY_TAILS = heavy_tails


@pytest.mark.parametrize("k", [2, 4])
def test_mean_traces_match_the_exact_mse_of_each_estimator(k):
    rng = np.random.default_rng(7)
    types = HEAVY_TAILS.population(rng)
    n_prompts, scale = 6000, 1.5
    chosen = np.zeros(n_prompts, dtype=int)  # every prompt of type 0, score scale 1.5: MSE = 1.5^2 x its type's
    per_prompt, _ = HEAVY_TAILS.traces(rng, types, chosen, np.full(n_prompts, scale), k)
    p, rewards, scores = types[0]
    moments = theory.exact_moments(p, rewards, scores @ scores.T)
    for name in HEAVY_TAILS.NAMES:
        exact = scale**2 * theory.closed_form_mse(moments, k, name)
        values = per_prompt[name]
        error = values.std(ddof=1) / np.sqrt(n_prompts)
        assert abs(values.mean() - exact) < 5 * error + 1e-12, (name, values.mean(), exact, error)
        assert error < 0.05 * exact  # the check can tell a factor K/(K-1) or a 1/K apart
