"""A map of the advisor's K* across settings: each run_tracecov.py main JSON (one setting each) -> one row:
studies.advisor.k_map (its flags: python scripts/k_map.py --help).
"""

from grpo_mse import cli
from studies.advisor.k_map import main

if __name__ == "__main__":
    cli.run(main)
