"""The sketched engine beside the fast one through run_tracecov.py on the same samples:
studies.benchmarks.bench_sketched (its flags: python scripts/bench_sketched.py --help).
"""

from grpo_mse import cli
from studies.benchmarks.bench_sketched import main

if __name__ == "__main__":
    cli.run(main)
