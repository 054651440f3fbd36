"""studies.advisor.simulated_records: a simulated prompt's and c1 batch's records hold what the advisor reads."""

from __future__ import annotations

import math

from studies.advisor.simulated_records import simulated_batch, simulated_prompt


def test_a_simulated_record_has_traces_only():
    """simulated_prompt: no text, no rewards (nan mean reward), V nan unless given."""
    record = simulated_prompt(4, 3, {"grpo": 1.5}, oracle_noise=0.25)
    assert (record.K, record.prompt_index, record.id, record.prompt, record.gold) == (4, 3, 3, None, None)
    assert math.isnan(record.V_oracle) and math.isnan(record.mean_reward) and record.oracle_noise == 0.25
    assert simulated_prompt(4, 3, {"grpo": 1.5}, V_oracle=0.5).V_oracle == 0.5


def test_a_simulated_c1_batch_holds_what_the_advisor_reads():
    """simulated_batch: batch 0, n from the indices, between/within/c1 nan (not computed)."""
    record = simulated_batch(4, [5, 6], [[1.0, 0.5], [0.5, 2.0]], [0.1, 0.2])
    assert (record.c1_batch, record.K, record.n, record.prompt_indices) == (0, 4, 2, [5, 6])
    assert all(math.isnan(v) for v in (record.between, record.within, record.c1)) and record.estimator_grams is None
