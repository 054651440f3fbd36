"""Group-size sweep at a fixed sampling budget: one ``grpo_train.sh`` run per (K, seed).

Batch sizes come from grpo_mse.training.budget (the launcher's own numbers). Runs are named
``{run_tag}_K{K}_seed{seed}``, which is how grpo_mse.training.logs finds K and the seed again.
"""

from __future__ import annotations

import os
import subprocess

from grpo_mse.training.budget import budget_settings

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER = os.path.join(REPO_ROOT, "Policy_Optimization", "grpo_train.sh")


def plan(k_list: list[int], seeds: list[int], run_tag: str = "grpo", budget: int = 1024) -> list[dict]:
    """All runs of the sweep; every K is checked against the budget before anything starts."""
    for k in k_list:
        budget_settings(k, budget)
    return [
        {"K": k, "seed": seed, "name": f"{run_tag}_K{k}_seed{seed}", **budget_settings(k, budget)}
        for seed in seeds
        for k in k_list
    ]


def run_env(run: dict, budget: int, dry_run: str, base_env: dict | None = None) -> dict:
    """Environment for ``grpo_train.sh`` of one run (``dry_run``: "0", "1" or "print").

    An exported ``LOG_FILE`` or ``CKPT_DIR`` names the sweep's, not one run's: each run gets its own,
    ``{stem}_{run name}{ext}`` and ``{CKPT_DIR}/{run name}``, so no two runs share a log or a checkpoint folder.
    """
    env = dict(os.environ if base_env is None else base_env)
    if env.get("LOG_FILE"):
        stem, ext = os.path.splitext(env["LOG_FILE"])
        env["LOG_FILE"] = f"{stem}_{run['name']}{ext or '.log'}"
    if env.get("CKPT_DIR"):
        env["CKPT_DIR"] = os.path.join(env["CKPT_DIR"], run["name"])
    env.update(
        GROUP_SIZE=str(run["K"]),
        SEED=str(run["seed"]),
        BUDGET=str(budget),
        EXPERIMENT_NAME=run["name"],
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
        print(
            f"[sweep] {i + 1}/{len(runs)} {run['name']} (K={run['K']}, seed={run['seed']}, DRY_RUN={mode})", flush=True
        )
        code = subprocess.call(["bash", launcher, *overrides], env=run_env(run, budget, mode))
        results.append((run, code))
        if code != 0 and not keep_going:
            print(f"[sweep] {run['name']} failed with exit code {code}; stopping", flush=True)
            break
    return results
