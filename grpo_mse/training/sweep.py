"""Group-size sweep at a fixed sampling budget: one ``grpo_train.sh`` run per (K, seed).

Batch sizes come from grpo_mse.training.budget (the launcher's own numbers). Runs are named
``{run_tag}_K{K}_seed{seed}``, which is how grpo_mse.training.logs finds K and the seed again.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import UsageError, require
from grpo_mse.flags import Flags, option
from grpo_mse.training.budget import budget_settings

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER = os.path.join(REPO_ROOT, "Policy_Optimization", "grpo_train.sh")
DRY_RUN_VALUES = {
    "": False,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "print": True,
}


def env_dry_run(environ=None) -> bool:
    """DRY_RUN from the environment (0/1, true/false, yes/no, on/off, print); anything else is a UsageError."""
    raw = (os.environ if environ is None else environ).get("DRY_RUN", "0")
    text = raw.strip().lower()
    require(text in DRY_RUN_VALUES, f"DRY_RUN={raw!r}: use 1 or print (dry run) or 0")
    return DRY_RUN_VALUES[text]


@dataclass(kw_only=True)
class SweepConfig(Flags):
    """Policy_Optimization/sweep_group_size.py: which (K, seed) runs to launch, at which budget, and how.

    On construction: repeated K or seeds are dropped (with a note), every K is checked against the budget,
    ``dry_run`` also follows ``DRY_RUN`` in the environment, ``run_tag`` defaults to ``$RUN_TAG`` (else
    ``grpo``) and ``launcher`` to this repository's grpo_train.sh.
    """

    K_list: list[int] = option([4, 8, 16, 32, 64, 128], minimum=2, help="group sizes")
    seeds: list[int] = option([0, 1, 2, 3, 4], minimum=0, help="training seeds")
    budget: int = option(1024, minimum=8, help="sequences per step")
    run_tag: str | None = option(None, help="runs are named TAG_K{K}_seed{S} (default: $RUN_TAG, else grpo)")
    dry_run: bool = option(
        False, help="print every run, have VERL validate the first (also DRY_RUN=1 in the environment)"
    )
    validate_all: bool = option(False, help="dry run: have VERL validate every run")
    keep_going: bool = option(False, help="continue after a failed run")
    launcher: str | None = option(
        None, help="script run once per (K, seed) (default: Policy_Optimization/grpo_train.sh of this repository)"
    )
    overrides: list[str] = option([], positional=True, help="Hydra overrides (or TRL flags after --) for every run")

    def __post_init__(self) -> None:
        super().__post_init__()  # bounds
        self.dry_run = self.dry_run or env_dry_run()
        self.K_list, self.seeds = cli.unique(self.K_list, "--K_list"), cli.unique(self.seeds, "--seeds")
        self.run_tag = os.environ.get("RUN_TAG", "grpo") if self.run_tag is None else self.run_tag
        require(
            bool(re.fullmatch(r"[A-Za-z0-9_.-]+", self.run_tag)),
            f"--run_tag {self.run_tag!r}: use letters, digits, '_', '.' or '-'",
        )
        self.launcher = LAUNCHER if self.launcher is None else self.launcher
        require(os.path.isfile(self.launcher), f"launcher not found: {self.launcher}")
        for k in self.K_list:
            try:
                budget_settings(k, self.budget)
            except ValueError as exc:
                raise UsageError(str(exc)) from None


@dataclass(frozen=True)
class PlannedRun:
    """One run of the sweep: group size K, its seed, and its name ``{run_tag}_K{K}_seed{seed}`` (logs, wandb)."""

    K: int
    seed: int
    name: str


def plan(k_list: list[int], seeds: list[int], run_tag: str = "grpo", budget: int = 1024) -> list[PlannedRun]:
    """All runs of the sweep, seed by seed; every K is checked against the budget before anything starts."""
    for k in k_list:
        budget_settings(k, budget)
    return [PlannedRun(k, seed, f"{run_tag}_K{k}_seed{seed}") for seed in seeds for k in k_list]


def run_env(run: PlannedRun, budget: int, dry_run: str, base_env: dict | None = None) -> dict:
    """Environment for ``grpo_train.sh`` of one run (``dry_run``: "0", "1" or "print").

    An exported ``LOG_FILE`` or ``CKPT_DIR`` names the sweep's, not one run's: each run gets its own,
    ``{stem}_{run name}{ext}`` and ``{CKPT_DIR}/{run name}``, so no two runs share a log or a checkpoint folder.
    """
    env = dict(os.environ if base_env is None else base_env)
    if env.get("LOG_FILE"):
        stem, ext = os.path.splitext(env["LOG_FILE"])
        env["LOG_FILE"] = f"{stem}_{run.name}{ext or '.log'}"
    if env.get("CKPT_DIR"):
        env["CKPT_DIR"] = os.path.join(env["CKPT_DIR"], run.name)
    env.update(
        GROUP_SIZE=str(run.K),
        SEED=str(run.seed),
        BUDGET=str(budget),
        EXPERIMENT_NAME=run.name,
        DRY_RUN=dry_run,
    )
    return env


def launch(runs, overrides=(), budget=1024, dry_run=False, validate_all=False, keep_going=False, launcher=LAUNCHER):
    """Run (or dry-run) every planned run in turn; returns ``[(run, exit_code)]``.

    A dry run has VERL compose and validate the configuration of the first run (of every run
    with ``validate_all``) and only prints the others.
    """
    results = []
    for i, run in enumerate(runs):
        mode = ("1" if validate_all or i == 0 else "print") if dry_run else "0"
        print(f"[sweep] {i + 1}/{len(runs)} {run.name} (K={run.K}, seed={run.seed}, DRY_RUN={mode})", flush=True)
        code = subprocess.call(["bash", launcher, *overrides], env=run_env(run, budget, mode))
        results.append((run, code))
        if code != 0 and not keep_going:
            print(f"[sweep] {run.name} failed with exit code {code}; stopping", flush=True)
            break
    return results
