"""Algorithm 1 on CPU: SGD (or, with --optimizer adamw, AdamW) ascent with the vanilla, GRPO or oracle-baseline:
studies.simulation.simulate_algorithm1 (its flags: python scripts/simulate_algorithm1.py --help).
"""

from grpo_mse import cli
from studies.simulation.simulate_algorithm1 import main

if __name__ == "__main__":
    cli.run(main)
