"""The markdown flag tables of config dataclasses, as docs/ shows them: studies.flag_tables
(its flags: python scripts/flag_tables.py --help).
"""

from grpo_mse import cli
from studies.flag_tables import main

if __name__ == "__main__":
    cli.run(main)
