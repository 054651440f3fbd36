"""scripts/advisor_check.py: the extrapolation check of the advisor's error model on records that obey it
exactly (measured = predicted in every bootstrap row) and on records that do not (c3 per K drifting)."""

import numpy as np
import pytest

from studies.advisor import advisor_check as advisor_check_command
from studies.advisor.simulated_records import simulated_batch, simulated_prompt

check = advisor_check_command
FIT, CHECK, BUDGET, T = (2, 4, 8), (16, 32), 512, 12


def records(c3_at=lambda k, c3: c3):
    """Per K, per prompt: tr_oracle = c2_x/K, tr_grpo = tr_oracle + c3_x/(K (K-1)) (the U-statistic law), and
    c1 batches with the same Gram at every K (c1 does not depend on K)."""
    rng = np.random.default_rng(0)
    c2, c3 = rng.uniform(1, 5, T), rng.uniform(0.5, 8, T)
    means = rng.normal(size=(T, 3))
    by_k, batches = {}, {}
    for k in (*FIT, *CHECK):
        c3_k = c3_at(k, c3)
        by_k[k] = [
            simulated_prompt(k, i, {"oracleV": c2[i] / k, "grpo": c2[i] / k + c3_k[i] / (k * (k - 1))})
            for i in range(T)
        ]
        batches[k] = [
            simulated_batch(k, idx, (means[idx] @ means[idx].T).tolist(), [0.1] * 6)
            for idx in (list(range(6)), list(range(6, 12)))
        ]
    return by_k, batches, c2, c3


def test_measured_equals_predicted_when_the_law_holds():
    by_k, batches, c2, c3 = records()
    out = check.extrapolation(by_k, batches, FIT, CHECK, BUDGET, n_boot=300, seed=1)
    c1 = out["fitted"]["c1"]["estimate"]
    assert out["fitted"]["c2"]["estimate"] == pytest.approx(c2.mean())
    assert out["fitted"]["c3"]["estimate"] == pytest.approx(c3.mean())
    for k in CHECK:
        cell = out["check"][str(k)]
        expected = (c1 * k + c2.mean() + c3.mean() / (k - 1)) / BUDGET  # by hand
        assert cell["predicted"]["estimate"] == pytest.approx(expected)
        assert cell["measured"]["estimate"] == pytest.approx(expected)
        assert cell["measured_over_predicted"]["ci95"] == pytest.approx([1.0, 1.0])


def test_a_drifting_c3_is_caught():
    """c3 four times larger at the check K: the measured error exceeds the prediction, interval above 1."""
    by_k, batches, _, _ = records(lambda k, c3: c3 * (4.0 if k in CHECK else 1.0))
    out = check.extrapolation(by_k, batches, FIT, CHECK, BUDGET, n_boot=300, seed=1)
    for k in CHECK:
        assert out["check"][str(k)]["measured_over_predicted"]["ci95"][0] > 1.0
