"""Trace of covariance (= MSE) of the vanilla, GRPO and oracle-baseline policy gradients against K:
grpo_mse.commands.tracecov (its flags and what it does: python Gradient_evaluation/run_tracecov.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.tracecov import main

if __name__ == "__main__":
    cli.run(main, resume_hint="rerun the same command with --resume to continue")
