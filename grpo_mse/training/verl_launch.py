"""Check a VERL PPO command line without training: ``python -m grpo_mse.training.verl_launch <overrides>``.

Step 1 is exactly ``python -m verl.trainer.main_ppo --cfg job --resolve <overrides>``: VERL's own
Hydra entry point composes and prints the configuration. Before it, each override's key is looked up
in VERL's composed default configuration (``trainer.totl_epochs=2`` is refused in one line naming the
closest known key, instead of Hydra's multi-line message), the value that wins (the last override of a
key) is checked against the type of the default it replaces (``trainer.total_epochs=abc`` is refused:
VERL's YAML config would take the string and fail only on the cluster), and the train/val files are
read with the shared table reader (a parquet file with ``prompt``, ``reward_model.ground_truth`` and
``data_source``). Step 2 runs VERL's ``validate_config`` on the same configuration (batch-size
divisibility and so on), which main_ppo would otherwise only do on the cluster. Nothing needs a GPU.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import DataError
from grpo_mse.flags import Flags, option


def compose(overrides: list[str]):
    """The PPO trainer configuration that ``main_ppo`` would build from ``overrides``."""
    # The module `hydra` comes from the distribution `hydra-core` (requirements-verl.txt, the `train` extra); loaded
    # by name so that requirement checkers guessing a distribution from the module name do not look for `hydra`.
    hydra = importlib.import_module("hydra")
    with hydra.initialize_config_module("verl.trainer.config", version_base=None):
        return hydra.compose("ppo_trainer", overrides=list(overrides))


def _key(override: str) -> tuple[str, str]:
    """(prefix, key) of ``key=value``, ``+key=value``, ``++key=value`` or ``~key``."""
    key = override.partition("=")[0]
    prefix = key[: len(key) - len(key.lstrip("+~"))]
    return prefix, key[len(prefix) :]


def _is_group(key: str) -> bool:
    """A Hydra config-group override (``model@actor_rollout_ref.model=...``, ``a/b=...``, a top-level name)."""
    return "/" in key or "@" in key or "." not in key


def _lookup(tree, parts: list[str]) -> bool:
    """True when the dotted path ``parts`` names a key of the plain container ``tree`` (lists end the walk)."""
    for part in parts:
        if isinstance(tree, list):
            return True
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def _closest(tree, parts: list[str]) -> str | None:
    """The known dotted key nearest to ``parts``: the first unknown part replaced by its closest sibling."""
    node = tree
    for index, part in enumerate(parts):
        if not isinstance(node, dict):
            return None
        if part not in node:
            match = difflib.get_close_matches(part, [str(k) for k in node], n=1, cutoff=0.6)
            guess = [*parts[:index], *match, *parts[index + 1 :]]
            return ".".join(guess) if match and _lookup(tree, guess) else None
        node = node[part]
    return None


def check_override_keys(overrides: list[str]) -> str | None:
    """A one-line problem naming an override whose key is not in VERL's composed default configuration, else None.

    ``key=value`` and ``~key`` need a known key (Hydra refuses others with a multi-line message); ``+key``,
    ``++key``, ``hydra.*`` and config-group overrides are left to Hydra. The defaults are composed with the
    group overrides, so a key of another group choice counts as known.
    """
    from omegaconf import OmegaConf

    groups = [o for o in overrides if "=" in o and not _key(o)[0] and _is_group(_key(o)[1])]
    tree = OmegaConf.to_container(compose(groups), resolve=False)
    for override in overrides:
        prefix, key = _key(override)
        if prefix not in ("", "~") or _is_group(key) or key.startswith("hydra.") or not key:
            continue
        if not _lookup(tree, key.split(".")):
            guess = _closest(tree, key.split("."))
            hint = f" (did you mean {guess}?)" if guess else ""
            new_key = "" if prefix else f"; a new key needs +{key}=..."
            return f"override {override}: VERL's configuration has no key {key}{hint}{new_key}"
    return None


def check_override_types(overrides: list[str]) -> str | None:
    """A one-line problem with an override whose value does not fit the type of VERL's default, else None.

    An integer default needs an integer, a float default a finite number, a boolean default true/false;
    keys that are new (``+key=...``) or whose default is null, a string or a list are left to VERL. Of several
    overrides of one key the last one wins (as in Hydra), so that is the one checked and quoted.
    """
    import math

    from omegaconf import OmegaConf

    defaults, composed = compose([]), compose(overrides)
    winning = {}
    for override in overrides:
        key, sep, _ = override.partition("=")
        if sep and not key.startswith(("+", "~", "hydra.")):
            winning[key] = override
    for key, override in winning.items():
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


DATA_KEYS = ("data.train_files", "data.val_files")
DATA_COLUMNS = ("prompt", "ground_truth", "data_source")  # ground_truth: reward_model.ground_truth, lifted


def check_data_files(overrides: list[str]) -> str | None:
    """A one-line problem with a train/val file of the composed configuration, else None.

    Each file must be a readable parquet file whose rows have ``prompt``, ``reward_model.ground_truth`` and
    ``data_source`` (what prepare_data.py writes and VERL's RLHFDataset and reward manager read); it is read
    with the shared table reader, as the TRL dry run reads its files.
    """
    from omegaconf import OmegaConf

    from grpo_mse.rewards.rules import check_answers
    from grpo_mse.tables.inputs import load_rows

    config = compose(overrides)
    for key in DATA_KEYS:
        value = OmegaConf.select(config, key, default=None)
        paths = list(value) if OmegaConf.is_list(value) else [value]
        for path in map(str, paths):
            if not path.endswith(".parquet"):
                return f"{key}={path}: VERL reads parquet files (Policy_Optimization/prepare_data.py writes them)"
            try:
                check_answers(load_rows(path, required=DATA_COLUMNS), path)  # a gold no answer matches scores 0
            except DataError as error:
                return f"{key}: {error}"
    return None


def print_job_config(overrides: list[str]) -> None:
    """Run VERL's ``main_ppo`` entry point with ``--cfg job --resolve`` (prints, never trains)."""
    from verl.trainer import main_ppo

    with cli.command_line(["verl.trainer.main_ppo", "--cfg", "job", "--resolve", *overrides]):
        main_ppo.main()


def validate(overrides: list[str]) -> None:
    """VERL's own configuration checks (raises AssertionError/ValueError on a bad configuration)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = compose(overrides)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


@dataclass(kw_only=True)
class VerlDryRunConfig(Flags):
    """The Hydra overrides of one VERL PPO command line."""

    overrides: list[str] = option([], positional=True, help="Hydra overrides (key=value, +key=value, ~key)")


def main(argv: list[str] | None = None) -> int:
    overrides = VerlDryRunConfig.from_argv(argv, description=__doc__).overrides
    problem = None
    for check in (check_override_keys, check_override_types, check_data_files):
        try:
            problem = check(overrides)
        except Exception:  # a malformed override: step 1 prints Hydra's own message
            problem = None
            break
        if problem:
            break
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
    cli.run(main)
