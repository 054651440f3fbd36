"""End to end through the real command lines: run_tracecov.py --engine fast against --engine reference:
studies.benchmarks.bench_cli (its flags: python scripts/bench_cli.py --help).
"""

from grpo_mse import cli
from studies.benchmarks.bench_cli import main

if __name__ == "__main__":
    cli.run(main)
