"""Reward function that VERL loads by path (reward.custom_reward_function.path / .name).

VERL calls ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``
for every response, possibly from a worker thread; the rules live in grpo_mse.answer_rules.
"""

from __future__ import annotations

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:  # loaded by path, so the package may not be importable yet
    sys.path.insert(0, REPO_ROOT)

from grpo_mse.answer_rules import score  # noqa: E402


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """1.0 for a correct final answer, 0.0 otherwise (never raises)."""
    try:
        return float(score(data_source, solution_str, ground_truth))
    except Exception:
        return 0.0
