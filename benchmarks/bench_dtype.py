"""fp32 against bf16 on the CPU through the real command lines: grpo_mse.commands.bench_dtype (its flags:
python benchmarks/bench_dtype.py --help).
"""

from grpo_mse import cli
from grpo_mse.commands.bench_dtype import main

if __name__ == "__main__":
    cli.run(main)
