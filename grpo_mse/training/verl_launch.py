"""Check a VERL PPO command line without training: ``python -m grpo_mse.training.verl_launch <overrides>``.

Step 1 is exactly ``python -m verl.trainer.main_ppo --cfg job --resolve <overrides>``: VERL's own
Hydra entry point composes and prints the configuration (a misspelled key fails here). Step 2
runs VERL's ``validate_config`` on the same configuration (batch-size divisibility and so on),
which main_ppo would otherwise only do on the cluster. Neither step needs a GPU.
"""

from __future__ import annotations

import sys


def compose(overrides: list[str]):
    """The PPO trainer configuration that ``main_ppo`` would build from ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("verl.trainer.config", version_base=None):
        return hydra_compose("ppo_trainer", overrides=list(overrides))


def print_job_config(overrides: list[str]) -> None:
    """Run VERL's ``main_ppo`` entry point with ``--cfg job --resolve`` (prints, never trains)."""
    from verl.trainer import main_ppo

    saved = sys.argv
    sys.argv = ["verl.trainer.main_ppo", "--cfg", "job", "--resolve", *overrides]
    try:
        main_ppo.main()
    finally:
        sys.argv = saved


def validate(overrides: list[str]) -> None:
    """VERL's own configuration checks (raises AssertionError/ValueError on a bad configuration)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = compose(overrides)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def main(argv: list[str] | None = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    print_job_config(overrides)
    try:
        validate(overrides)
    except Exception as exc:  # report VERL's message, not a traceback
        print(f"[dry run] VERL rejected the configuration: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print("[dry run] configuration composed and validated by VERL; nothing was trained", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
