"""Group-size sweep at a fixed sampling budget (the paper's Section 5.2): one grpo_train.sh run per (K, seed).

  export MODEL=Qwen/Qwen2.5-1.5B-Instruct DATA_DIR=data/gsm8k
  python Policy_Optimization/sweep_group_size.py --K_list 4 8 16 32 64 128 --seeds 0 1 2 3 4
  DRY_RUN=1 ... python Policy_Optimization/sweep_group_size.py ...   # print all, validate the first

Settings other than K, seed and budget come from the environment exactly as for grpo_train.sh
(``TRAINER=trl`` trains with TRL on CPU); arguments for every run go after ``--`` (VERL Hydra
overrides such as ``-- trainer.total_epochs=2``, or TRL flags such as ``-- --max_steps 30``).
"""

from __future__ import annotations

from grpo_mse.training.sweep import SweepConfig, launch, plan


def parse_args(argv=None) -> SweepConfig:
    """The sweep from the command line (flags are SweepConfig's fields; DRY_RUN in the environment counts)."""
    return SweepConfig.from_argv(argv, description=__doc__)


def main(argv=None) -> int:
    args = parse_args(argv)
    runs = plan(args.K_list, args.seeds, args.run_tag, args.budget)  # every K was checked against the budget
    results = launch(runs, args.overrides, args.budget, args.dry_run, args.validate_all, args.keep_going, args.launcher)
    failed = [run.name for run, code in results if code != 0]
    print(
        f"[sweep] {len(results) - len(failed)}/{len(runs)} runs succeeded" + (f"; failed: {failed}" if failed else "")
    )
    if failed and all(code == 2 for _, code in results if code != 0) and len(failed) == len(results):
        return 2  # every run tried was refused (a bad setting, the launcher's one-line error above): a bad input
    return 1 if failed or len(results) < len(runs) else 0
