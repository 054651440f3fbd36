"""Why a run's MSEs are the size they are, against the paper's (response lengths, score norms by length, the oracle
MSE predicted from V (1 - V) and the norms): studies.audits.scale_account (its flags: python scripts/scale_account.py
--help).

  python scripts/scale_account.py --run RUN.json --diagnostic explain_baseline.json --out scale_account.json
"""

from grpo_mse import cli
from studies.audits.scale_account import main

if __name__ == "__main__":
    cli.run(main)
