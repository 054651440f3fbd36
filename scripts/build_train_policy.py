"""Build the training-demo policy (assets/train_policy) from the built-in one and print V(x) and greedy accuracy:
studies.builders.build_train_policy (its flags: python scripts/build_train_policy.py --help).
"""

from grpo_mse import cli
from studies.builders.build_train_policy import main

if __name__ == "__main__":
    cli.run(main)
