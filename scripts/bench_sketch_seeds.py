"""Is the sketched engine unbiased on a real model, and does its block spread estimate its own error:
studies.benchmarks.sketch_seeds (its flags: python scripts/bench_sketch_seeds.py --help).
"""

from grpo_mse import cli
from studies.benchmarks.sketch_seeds import main

if __name__ == "__main__":
    cli.run(main)
