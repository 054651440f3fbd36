"""Collect the metrics of GRPO training runs (console logs, wandb run folders) into one CSV:
grpo_mse.commands.collect_runs (its flags: python Policy_Optimization/collect_runs.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.collect_runs import main

if __name__ == "__main__":
    cli.run(main)
