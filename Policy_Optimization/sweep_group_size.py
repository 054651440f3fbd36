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
import sys

from grpo_mse.training.sweep import LAUNCHER, launch, plan

DRY_RUN_VALUES = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True,
                  "print": True}  # fmt: skip


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--K_list", type=int, nargs="+", default=[4, 8, 16, 32, 64, 128])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--budget", type=int, default=1024, help="sequences per step")
    p.add_argument("--run_tag", default=os.environ.get("RUN_TAG", "grpo"), help="runs are named TAG_K{K}_seed{S}")
    p.add_argument("--dry_run", action="store_true", help="default: the DRY_RUN environment variable (0, 1, print)")
    p.add_argument("--validate_all", action="store_true", help="dry run: have VERL validate every run")
    p.add_argument("--keep_going", action="store_true", help="continue after a failed run")
    p.add_argument("--launcher", default=LAUNCHER)
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    args = p.parse_args(argv)
    dry_env = os.environ.get("DRY_RUN", "0")
    if dry_env not in DRY_RUN_VALUES:
        p.error(f"DRY_RUN={dry_env}: use 0, 1 or print")
    args.dry_run = args.dry_run or DRY_RUN_VALUES[dry_env]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        runs = plan(args.K_list, args.seeds, args.run_tag, args.budget)
    except ValueError as exc:
        print(f"sweep_group_size.py: error: {exc}", file=sys.stderr)
        return 2
    results = launch(runs, args.overrides, args.budget, args.dry_run, args.validate_all, args.keep_going, args.launcher)
    failed = [run["name"] for run, code in results if code != 0]
    print(
        f"[sweep] {len(results) - len(failed)}/{len(runs)} runs succeeded" + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed or len(results) < len(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
