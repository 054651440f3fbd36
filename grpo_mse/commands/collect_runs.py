"""Collect the metrics of GRPO training runs (console logs, wandb run folders) into one CSV.

  python Policy_Optimization/collect_runs.py outputs/logs outputs/wandb --out results/training_runs.csv

Columns: K, seed, step, metric, value, budget, lr, trainer, status. A run's identity and completeness come from
what it recorded (grpo_mse.training.run_identity), never from its name; a run recorded twice (console and wandb,
or in two merged sweep folders) is one run. Then draw Figure 5 and Table 2 with
``python -m grpo_mse.figures.training --csv results/training_runs.csv``.
"""

from __future__ import annotations

from grpo_mse.errors import require
from grpo_mse.tables.outputs import write_atomic
from grpo_mse.training.logs import CollectConfig, collect
from grpo_mse.training.run_identity import UNRECORDED


def parse_args(argv=None) -> CollectConfig:
    """What to collect, from the command line (flags are CollectConfig's fields)."""
    return CollectConfig.from_argv(argv, description=__doc__)


def main(argv=None):
    args = parse_args(argv)
    frame = collect(args.paths, args.metrics)
    require(not frame.empty, f"no training metrics found under {' '.join(args.paths)} (nothing written)")
    write_atomic(args.out, frame.to_csv(index=False))
    runs = frame[["K", "seed", "status"]].drop_duplicates()
    print(f"{len(frame)} rows from {len(runs)} runs (K: {sorted(runs['K'].unique().tolist())}) -> {args.out}")
    for status, group in runs[runs["status"] != "complete"].groupby("status"):
        listed = ", ".join(f"K={k} seed={seed}" for k, seed in zip(group["K"], group["seed"]))
        note = (
            "completeness not recorded: included, with a footnote"
            if status == UNRECORDED
            else "left out of Table 2 and Figure 5 unless --include_incomplete"
        )
        print(f"{status}: {listed} ({note})")
    return frame
