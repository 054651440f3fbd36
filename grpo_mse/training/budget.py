"""Fixed sampling budget: the batch sizes of one GRPO run at N sequences per step and group size K.

At budget N, K samples per prompt means N/K prompts per step (VERL ``data.train_batch_size``),
N/(4K) prompts per mini-batch (``ppo_mini_batch_size``, four updates per step) and N/(8K)
epochs (``trainer.total_epochs``), so every K runs the same number of steps. The VERL launcher
and the TRL backend both take their numbers from :func:`budget_settings`; the launcher calls

  python -m grpo_mse.training.budget K N      # prints TRAIN_BATCH_SIZE=.. PPO_MINI_BATCH_SIZE=.. TOTAL_EPOCHS=..
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option


def budget_settings(k: int, budget: int = 1024, k_name: str = "K") -> dict:
    """Batch settings for group size ``k`` at ``budget`` sequences per step (ValueError if K does not fit)."""
    if k < 2:
        raise ValueError(f"{k_name}={k}: GRPO needs at least 2 samples per prompt")
    if budget < 8 or budget % 8:
        raise ValueError(f"BUDGET={budget} must be a positive multiple of 8")
    for what, total in (
        ("train_batch_size", budget),
        ("ppo_mini_batch_size", budget // 4),
        ("total_epochs", budget // 8),
    ):
        if total % k:
            raise ValueError(
                f"{k_name}={k} must divide {total} ({what} = {total}/K at BUDGET={budget}); "
                "choose a K that divides it, or another BUDGET"
            )
    return {"train_batch_size": budget // k, "ppo_mini_batch_size": budget // 4 // k, "total_epochs": budget // 8 // k}


@dataclass(kw_only=True)
class BudgetConfig(Flags):
    """Group size and budget, both positional; budget_settings checks that they fit."""

    K: int | None = option(None, positional=True, nargs="?", help="group size (the launcher's GROUP_SIZE)")
    BUDGET: int | None = option(None, positional=True, nargs="?", help="sequences per step")


def main(argv: list[str] | None = None) -> int:
    """Print the settings as shell assignments for ``grpo_train.sh``; one line and exit 2 on a bad K."""
    args = BudgetConfig.from_argv(argv, description=__doc__)
    try:
        if args.K is None or args.BUDGET is None:
            raise ValueError("usage: python -m grpo_mse.training.budget K BUDGET")
        settings = budget_settings(args.K, args.BUDGET, k_name="GROUP_SIZE")
    except ValueError as exc:
        print(f"grpo_train.sh: error: {exc}", file=sys.stderr)
        return 2
    print(" ".join(f"{name.upper()}={value}" for name, value in settings.items()))
    return 0


if __name__ == "__main__":
    cli.run(main)
