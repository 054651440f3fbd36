"""Verifiable 0/1 rewards, one rule per data source, shared by gradient evaluation and training."""

from grpo_mse.rewards.rules import DEFAULT_SOURCE, last_integer, last_integer_reward, parse_gold, row_reward, score

__all__ = ["DEFAULT_SOURCE", "last_integer", "last_integer_reward", "parse_gold", "row_reward", "score"]
