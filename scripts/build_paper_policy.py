"""Build the paper-regime policy (assets/paper_policy) from the built-in one and print its V(x) summary:
studies.builders.build_paper_policy (its flags: python scripts/build_paper_policy.py --help).
"""

from grpo_mse import cli
from studies.builders.build_paper_policy import main

if __name__ == "__main__":
    cli.run(main)
