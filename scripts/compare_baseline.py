"""The Assumption-2 diagnostic of several policies side by side (from scripts/explain_baseline.py's JSON files):
studies.audits.compare_baseline (its flags: python scripts/compare_baseline.py --help).
"""

from grpo_mse import cli
from studies.audits.compare_baseline import main

if __name__ == "__main__":
    cli.run(main)
