"""How long a killed mutant's tests take in mutmut's own order against tests/conftest.py's ``fastest_first``
(docs/tests.md): for a sample of killed mutants, their tests (the ones mutmut's map ties to the function) run with
``-x`` in a shuffled order, as mutmut hands them over, once in a copy whose tests/conftest.py does not reorder and
once in a copy whose does; each run is a fresh pytest (about 4 s of start-up that mutmut's forked workers do not pay).

  python scripts/bench_mutation_order.py --plain /tmp/mut-old --ordered /tmp/mut-new --results results.txt \
      --module analysis.bootstrap --count 12 --seed 1

Both folders are copies of mutmut's mutants/ with its mutmut-stats.json; ``--results`` is `mutmut results --all true`.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option


@dataclass(kw_only=True)
class OrderBenchConfig(Flags):
    """The two copies of mutants/, mutmut's verdicts, and the sample."""

    plain: str = option(help="a copy of mutants/ whose tests/conftest.py leaves the order alone")
    ordered: str = option(help="a copy of mutants/ whose tests/conftest.py has fastest_first")
    results: str = option(help="the output of `mutmut results --all true`")
    module: str = option("analysis.bootstrap", help="the module whose killed mutants are sampled")
    count: int = option(12, help="killed mutants sampled")
    seed: int = option(0, help="the sample's and the shuffles' seed")


def seconds(folder: str, mutant: str, tests: list[str]) -> tuple[float, int]:
    """Wall seconds and exit code of one mutant's tests, stopped at the first failure, in ``folder``."""
    env = dict(os.environ, MUTANT_UNDER_TEST=mutant, PYTHONPATH=folder, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done.returncode


def main(argv=None) -> None:
    args = OrderBenchConfig.from_argv(argv, description=__doc__)
    with open(args.results, encoding="utf-8") as handle:
        lines = [line.strip() for line in handle]
    killed = [line.split(":")[0] for line in lines if line.endswith(": killed") and f".{args.module}." in line]
    with open(os.path.join(args.ordered, "mutmut-stats.json"), encoding="utf-8") as handle:
        tests_of = json.load(handle)["tests_by_mangled_function_name"]
    rng = random.Random(args.seed)
    totals = {"plain": 0.0, "ordered": 0.0}
    for mutant in rng.sample(killed, min(args.count, len(killed))):
        tests = sorted(tests_of.get(mutant.split("__mutmut_")[0], []))
        rng.shuffle(tests)
        walls, codes = {}, {}
        for label in totals:
            walls[label], codes[label] = seconds(getattr(args, label), mutant, tests)
        if set(codes.values()) == {1}:  # 1: a test failed (killed); anything else is not a like-for-like run
            for label in totals:
                totals[label] += walls[label]
            row = ", ".join(f"{label} {walls[label]:.1f} s" for label in totals)
        else:
            row = "left out (exit " + ", ".join(f"{label} {codes[label]}" for label in totals) + ")"
        print(mutant.rsplit(".", 1)[1], f"{len(tests)} tests:", row, flush=True)
    ratio = totals["plain"] / totals["ordered"] if totals["ordered"] else float("nan")
    print(f"total: plain {totals['plain']:.1f} s, ordered {totals['ordered']:.1f} s, plain / ordered {ratio:.2f}")


if __name__ == "__main__":
    cli.run(main)
