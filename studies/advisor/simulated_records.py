"""Records of a simulation: what the advisor reads of a prompt (its traces) and of a c1 batch (its Gram matrix and
within-prompt variances), with no text and no rewards. The heavy-tail study (heavy_tails.py) feeds the advisor with
them, and so do the advisor's tests."""

from __future__ import annotations

import math

from grpo_mse.tables.records import C1BatchRecord, PromptRecord


def simulated_prompt(K: int, prompt_index: int, tr_cov: dict, V_oracle: float = math.nan, **optional) -> PromptRecord:
    """A record of a simulated prompt: traces only, no text and no rewards (mean_reward nan)."""
    return PromptRecord(K, prompt_index, prompt_index, None, None, V_oracle, math.nan, tr_cov, **optional)


def simulated_batch(
    K: int, prompt_indices: list[int], gram: list, within_each: list, estimator_grams=None
) -> C1BatchRecord:
    """A batch of a simulation (batch 0): what the advisor reads (indices, Gram matrix, within_each, any
    estimator_grams); between, within and c1 nan (not computed)."""
    nan = [math.nan] * 3
    return C1BatchRecord(0, K, len(prompt_indices), list(prompt_indices), gram, within_each, *nan, estimator_grams)
