"""Check a VERL PPO command line without training: ``python -m grpo_mse.training.verl_launch <overrides>``.

Step 1 is exactly ``python -m verl.trainer.main_ppo --cfg job --resolve <overrides>``: VERL's own
Hydra entry point composes and prints the configuration (a misspelled key fails here). Before it,
every override is checked against the type of the default it replaces (``trainer.total_epochs=abc``
is refused: VERL's YAML config would take the string and fail only on the cluster). Step 2
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


def check_override_types(overrides: list[str]) -> str | None:
    """A one-line problem with an override whose value does not fit the type of VERL's default, else None.

    An integer default needs an integer, a float default a finite number, a boolean default true/false;
    keys that are new (``+key=...``) or whose default is null, a string or a list are left to VERL.
    """
    import math

    from omegaconf import OmegaConf

    defaults, composed = compose([]), compose(overrides)
    for override in overrides:
        key, sep, _ = override.partition("=")
        if not sep or key.startswith(("+", "~", "hydra.")):
            continue
        default = OmegaConf.select(defaults, key, default=None)
        new = OmegaConf.select(composed, key, default=None)
        if isinstance(default, bool):
            ok, kind = isinstance(new, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = isinstance(new, int) and not isinstance(new, bool), "an integer"
        elif isinstance(default, float):
            ok = isinstance(new, (int, float)) and not isinstance(new, bool) and math.isfinite(new)
            kind = "a finite number"
        else:
            continue
        if not ok:
            shown = OmegaConf.to_yaml(new).strip() if OmegaConf.is_config(new) else repr(new)
            return f"override {override}: {key} must be {kind} (VERL's default is {default!r}), got {shown}"
    return None


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
    try:
        problem = check_override_types(overrides)
    except Exception:  # a malformed override: step 1 prints Hydra's own message
        problem = None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
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
