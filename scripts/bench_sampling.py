"""Throughput of the HF sampling path (grpo_mse.policy.sampling.HFSampler) at growing batch sizes, on a model with:
studies.benchmarks.bench_sampling (its flags: python scripts/bench_sampling.py --help).
"""

from grpo_mse import cli
from studies.benchmarks.bench_sampling import main

if __name__ == "__main__":
    cli.run(main)
