"""Do two oracle tables (calculate_oracle_v.py outputs) estimate the same V(x)? E.g. HF against vLLM sampling:
grpo_mse.commands.compare_oracle_tables (its flags: python scripts/compare_oracle_tables.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.compare_oracle_tables import main

if __name__ == "__main__":
    cli.run(main)
