"""Reward function that VERL loads by path (reward.custom_reward_function.path / .name).

VERL calls ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``
for every response, possibly from a worker thread; the rules live in grpo_mse.rewards.rules.
"""

from __future__ import annotations

from grpo_mse.rewards.rules import score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """1.0 for a correct final answer, 0.0 otherwise (never raises)."""
    try:
        return float(score(data_source, solution_str, ground_truth))
    except Exception:
        return 0.0
