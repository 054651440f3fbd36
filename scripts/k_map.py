"""A map of the advisor's K* across settings: each run_tracecov.py main JSON (one setting each) -> one row:
grpo_mse.commands.k_map (its flags: python scripts/k_map.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.k_map import main

if __name__ == "__main__":
    cli.run(main)
