"""Reference engine (three backward passes, Welford, prompt recomputed per sequence) against the fast:
studies.benchmarks.bench_engines (its flags: python benchmarks/bench_engines.py --help).
"""

from grpo_mse import cli
from studies.benchmarks.bench_engines import main

if __name__ == "__main__":
    cli.run(main)
