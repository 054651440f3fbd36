"""Verifiable 0/1 rewards, one rule per data source, shared by gradient evaluation and training."""

from grpo_mse.rewards.rules import last_integer, last_integer_reward, parse_gold, score

__all__ = ["last_integer", "last_integer_reward", "parse_gold", "score"]
