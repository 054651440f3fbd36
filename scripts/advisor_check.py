"""Does the advisor's error model extrapolate? Fit c1, c2, c3 on small K, predict the budgeted error at large K,:
studies.advisor.advisor_check (its flags: python scripts/advisor_check.py --help).
"""

from grpo_mse import cli
from studies.advisor.advisor_check import main

if __name__ == "__main__":
    cli.run(main)
