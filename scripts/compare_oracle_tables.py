"""Do two oracle tables (calculate_oracle_v.py outputs) estimate the same V(x)? E.g. HF against vLLM sampling:
studies.audits.compare_oracle_tables (its flags: python scripts/compare_oracle_tables.py --help).
"""

from grpo_mse import cli
from studies.audits.compare_oracle_tables import main

if __name__ == "__main__":
    cli.run(main)
