"""fp32 against bf16 on the CPU through the real command lines: studies.benchmarks.bench_dtype (its flags:
python scripts/bench_dtype.py --help).
"""

from grpo_mse import cli
from studies.benchmarks.bench_dtype import main

if __name__ == "__main__":
    cli.run(main)
