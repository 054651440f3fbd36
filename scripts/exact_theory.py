"""Exact oracle table and exact MSE curves for ONE generated token, by enumerating the vocabulary:
studies.exact.exact_theory (its flags: python scripts/exact_theory.py --help).
"""

from grpo_mse import cli
from studies.exact.exact_theory import main

if __name__ == "__main__":
    cli.run(main)
