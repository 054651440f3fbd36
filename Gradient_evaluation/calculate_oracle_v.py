"""Monte Carlo oracle value V(x) = P(reward = 1 | x) per prompt: grpo_mse.commands.oracle (its flags and what it does:
python Gradient_evaluation/calculate_oracle_v.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.oracle import main

if __name__ == "__main__":
    cli.run(main, resume_hint="rerun the same command with --resume to continue")
