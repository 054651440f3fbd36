"""Group-size sweep at a fixed sampling budget (the paper's Section 5.2): one grpo_train.sh run per (K, seed).

  export MODEL=Qwen/Qwen2.5-1.5B-Instruct DATA_DIR=data/gsm8k
  python Policy_Optimization/sweep_group_size.py --K_list 4 8 16 32 64 128 --seeds 0 1 2 3 4
  DRY_RUN=1 ... python Policy_Optimization/sweep_group_size.py ...   # print all, validate the first

Settings other than K, seed and budget come from the environment exactly as for grpo_train.sh
(``TRAINER=trl`` trains with TRL on CPU); arguments for every run go after ``--`` (VERL Hydra
overrides such as ``-- trainer.total_epochs=2``, or TRL flags such as ``-- --max_steps 30``).
"""

from __future__ import annotations

import argparse
import os
import re

from grpo_mse import cli
from grpo_mse.training.sweep import LAUNCHER, launch, plan

DRY_RUN_VALUES = {"": False, "0": False, "false": False, "no": False, "off": False,
                  "1": True, "true": True, "yes": True, "on": True, "print": True}


def env_dry_run() -> bool:
    """DRY_RUN from the environment (0/1, true/false, yes/no, on/off, print); anything else is a UsageError."""
    raw = os.environ.get("DRY_RUN", "0")
    text = raw.strip().lower()
    cli.require(text in DRY_RUN_VALUES, f"DRY_RUN={raw!r}: use 1 or print (dry run) or 0")
    return DRY_RUN_VALUES[text]


def parse_args(argv=None) -> argparse.Namespace:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--K_list", type=cli.integer(minimum=2), nargs="+", default=[4, 8, 16, 32, 64, 128],
                   help="group sizes")
    p.add_argument("--seeds", type=cli.integer(minimum=0), nargs="+", default=[0, 1, 2, 3, 4], help="training seeds")
    p.add_argument("--budget", type=cli.integer(minimum=8), default=1024, help="sequences per step")
    p.add_argument("--run_tag", default=os.environ.get("RUN_TAG", "grpo"), help="runs are named TAG_K{K}_seed{S}")
    p.add_argument("--dry_run", action="store_true", help="print every run, have VERL validate the first "
                   "(also DRY_RUN=1 in the environment)")
    p.add_argument("--validate_all", action="store_true", help="dry run: have VERL validate every run")
    p.add_argument("--keep_going", action="store_true", help="continue after a failed run")
    p.add_argument("--launcher", default=LAUNCHER, help="script run once per (K, seed)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    args = p.parse_args(argv)
    args.dry_run = args.dry_run or env_dry_run()
    args.K_list, args.seeds = cli.unique(args.K_list, "--K_list"), cli.unique(args.seeds, "--seeds")
    cli.require(bool(re.fullmatch(r"[A-Za-z0-9_.-]+", args.run_tag)),
                f"--run_tag {args.run_tag!r}: use letters, digits, '_', '.' or '-'")
    cli.require(os.path.isfile(args.launcher), f"launcher not found: {args.launcher}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        runs = plan(args.K_list, args.seeds, args.run_tag, args.budget)
    except ValueError as exc:
        raise cli.UsageError(str(exc)) from None
    results = launch(runs, args.overrides, args.budget, args.dry_run, args.validate_all, args.keep_going, args.launcher)
    failed = [run["name"] for run, code in results if code != 0]
    print(
        f"[sweep] {len(results) - len(failed)}/{len(runs)} runs succeeded" + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed or len(results) < len(runs) else 0


if __name__ == "__main__":
    cli.run(main)
