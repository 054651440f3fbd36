"""Reference engine (three backward passes, Welford, prompt recomputed per sequence) against the fast:
studies.benchmarks.bench_engines (its flags: python scripts/bench_engines.py --help).
"""

from grpo_mse import cli
from studies.benchmarks import bench_engines_flags
from studies.benchmarks.bench_engines_flags import BenchEnginesConfig


def main(argv=None) -> None:
    args = BenchEnginesConfig.from_argv(argv, description=bench_engines_flags.__doc__)
    from studies.benchmarks.bench_engines import run  # torch: after the flags are checked (--help stays fast)

    run(args)


if __name__ == "__main__":
    cli.run(main)
