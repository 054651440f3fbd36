"""Collect the metrics of GRPO training runs (console logs, wandb run folders) into one CSV.

  python Policy_Optimization/collect_runs.py outputs/logs outputs/wandb --out results/training_runs.csv

Columns: K, seed, step, metric, value. Then draw Figure 5 and Table 2 with
``python -m grpo_mse.figures.training --csv results/training_runs.csv``.
"""

from __future__ import annotations

import argparse
import os

from grpo_mse.training.logs import DEFAULT_METRICS, collect


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="log files or folders (searched recursively)")
    p.add_argument("--out", default="results/training_runs.csv")
    p.add_argument("--metrics", default=DEFAULT_METRICS, help="regex of metric names to keep ('.' keeps all)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    frame = collect(args.paths, args.metrics)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    frame.to_csv(args.out, index=False)
    runs = frame[["K", "seed"]].drop_duplicates()
    print(f"{len(frame)} rows from {len(runs)} runs (K: {sorted(runs['K'].unique().tolist())}) -> {args.out}")
    return frame


if __name__ == "__main__":
    main()
