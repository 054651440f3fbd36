"""A training run's identity (K, seed, budget, lr, trainer) and completeness, from what the run itself recorded.

The one place that decides which run a record belongs to. Sources, most authoritative first: the trainer's own
record (the wandb run config; TRL's ``[trl] K=.. budget=.. steps=.. lr=.. seed=..`` line), then the launcher's
``[grpo_train] settings:`` line (older logs: its first header line). A run's name (``..._K8_seed5``) is a label
only and never decides K or the seed. Completeness: the launcher's / trainer's ``end: exit=N`` line of a console
log, the exit record or ``run/exit_code`` summary of a wandb run; exit 0 is ``complete``, 130 and 143
``interrupted``, any other ``failed``; a launcher log without an end line is ``interrupted`` (or still running), a
truncated wandb file ``truncated``, and a record that holds no exit at all ``unrecorded``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

DEFAULT_SEED = -1  # the CSV's seed of a run launched without SEED (the trainer's own default seed)
COMPLETE, UNRECORDED = "complete", "unrecorded"
INCOMPLETE = ("interrupted", "failed", "truncated")  # refused by Table 2 and Figure 5 unless asked for
SETTINGS_LINE = "[grpo_train] settings:"
LEGACY_HEADER = re.compile(r"^\[grpo_train\] .*\bGROUP_SIZE=")  # older logs: the header line (no settings line)
TRL_LINE = re.compile(r"^\[trl\] K=\d+ ")
END_LINE = re.compile(r"^\[(?:grpo_train|trl)\] end: exit=(\d+)")
PAIR = re.compile(r"(?:^|\s)([A-Za-z_/]+)=(\S+)")


@dataclass(frozen=True, order=True)
class RunIdentity:
    """What makes two records one run: group size, seed (DEFAULT_SEED: the trainer's default), budget, lr, trainer."""

    K: int
    seed: int
    budget: int | None = None
    lr: float | None = None
    trainer: str | None = None

    def label(self) -> str:
        seed = "default" if self.seed == DEFAULT_SEED else self.seed
        return f"K={self.K} seed={seed} budget={self.budget} lr={self.lr} trainer={self.trainer}"


def _int(value) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number == int(number) else None


def _float(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _identity(k, seed, budget, lr, trainer) -> RunIdentity | None:
    """A RunIdentity from raw recorded values; None without a whole positive K. A seed "default"/None/"" is
    DEFAULT_SEED."""
    k = _int(k)
    if k is None or k < 1:
        return None
    seed_value = DEFAULT_SEED if seed in (None, "", "default") else _int(seed)
    if seed_value is None:
        return None
    return RunIdentity(k, seed_value, _int(budget), _float(lr), str(trainer) if trainer else None)


def _pairs(line: str) -> dict[str, str]:
    return {key: value for key, value in PAIR.findall(line)}


def from_console(lines: list[str]) -> tuple[RunIdentity | None, int | None]:
    """(identity, planned steps) from a console log's first lines: TRL's own line, else the launcher's settings
    line, else (older logs) the launcher's header line. Each field comes from the first of these that records it."""
    trl = next((_pairs(line.strip()) for line in lines if TRL_LINE.match(line.strip())), {})
    settings = next(
        (_pairs(line.strip()[len(SETTINGS_LINE) :]) for line in lines if line.strip().startswith(SETTINGS_LINE)), None
    )
    if settings is None:
        header = next((line.strip() for line in lines if LEGACY_HEADER.match(line.strip())), "")
        settings = {key: value for key, value in _pairs(header).items() if key != "EXPERIMENT_NAME"}
    if trl:
        trl = {
            "GROUP_SIZE": trl.get("K"),
            "SEED": trl.get("seed"),
            "BUDGET": trl.get("budget"),
            "LR": trl.get("lr"),
            "TRAINER": "trl",
            "STEPS": trl.get("steps"),
        }
    merged = {**settings, **{key: value for key, value in trl.items() if value is not None}}
    if "GROUP_SIZE" not in merged:
        return None, None
    identity = _identity(
        merged["GROUP_SIZE"], merged.get("SEED"), merged.get("BUDGET"), merged.get("LR"), merged.get("TRAINER")
    )
    return identity, _int(merged.get("STEPS"))


def nested(config: dict, dotted: str):
    """``config["a"]["b"]`` for ``"a.b"`` (wandb's ``{"value": ...}`` wrappers unwrapped), or None."""
    node = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
        if isinstance(node, dict) and "value" in node and set(node) <= {"value", "desc"}:  # wandb config.yaml
            node = node["value"]
    return node


def from_config(config: dict) -> tuple[RunIdentity | None, int | None]:
    """(identity, planned steps) from a wandb run config: TRL's (``trainer: trl``, ``budget``, ``lr``, ``steps``) or
    VERL's (``actor_rollout_ref.rollout.n``, ``data.seed``, ``data.train_batch_size`` x n, the actor's lr)."""
    k = nested(config, "actor_rollout_ref.rollout.n")
    trainer = nested(config, "trainer")
    trainer = trainer if isinstance(trainer, str) else ("verl" if nested(config, "actor_rollout_ref") else None)
    budget = nested(config, "budget")
    prompts = _int(nested(config, "data.train_batch_size"))
    if budget is None and prompts is not None and _int(k) is not None:
        budget = prompts * _int(k)
    lr = nested(config, "lr")
    lr = lr if lr is not None else nested(config, "actor_rollout_ref.actor.optim.lr")
    steps = nested(config, "steps")
    steps = steps if steps is not None else nested(config, "trainer.total_training_steps")
    return _identity(k, nested(config, "data.seed"), budget, lr, trainer), _int(steps)


def status_of_exit(code: int | None) -> str:
    """``complete`` for exit 0, ``interrupted`` for 130 and 143 (Ctrl-C, SIGTERM), ``failed`` otherwise;
    UNRECORDED for None."""
    if code is None:
        return UNRECORDED
    return COMPLETE if code == 0 else ("interrupted" if code in (130, 143) else "failed")


def console_status(lines: list[str]) -> str:
    """A console log's completeness: its last ``end: exit=N`` line, else ``interrupted`` when the launcher or TRL
    started it (they always write one at the end), else UNRECORDED."""
    ends = [int(match.group(1)) for line in lines if (match := END_LINE.match(line.strip()))]
    if ends:
        return status_of_exit(ends[-1])
    started = any(
        line.strip().startswith(SETTINGS_LINE) or LEGACY_HEADER.match(line.strip()) or TRL_LINE.match(line.strip())
        for line in lines
    )
    return "interrupted" if started else UNRECORDED


def best_status(first: str, second: str) -> str:
    """The completeness of one run recorded twice: complete if either record is, else the more informative one."""
    order = [COMPLETE, *INCOMPLETE, UNRECORDED]
    return min(first, second, key=order.index)


@dataclass
class RunRecord:
    """One record of a run (a console log or a wandb folder): its identity, planned steps, status and metrics."""

    path: str
    name: str
    identity: RunIdentity | None
    planned_steps: int | None
    status: str
    records: list  # (step, metric, value)
