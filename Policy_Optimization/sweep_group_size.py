"""Group-size sweep at a fixed sampling budget (the paper's Section 5.2): one grpo_train.sh run per (K, seed):
grpo_mse.commands.sweep_group_size (its flags: python Policy_Optimization/sweep_group_size.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.sweep_group_size import main

if __name__ == "__main__":
    cli.run(main)
