"""Do two trace-of-covariance runs (run_tracecov.py outputs) estimate the same traces? E.g. a CUDA run against the
committed CPU run (results/demo), on the prompts they share.

Paired by prompt: for each estimator e and K, d_i = trace_a(x_i) - trace_b(x_i) over the prompts both runs hold
(same prompt, same oracle V, independent samples, so the prompts' own spread cancels). z = mean d / (sd d / sqrt n).
They agree when every |z| <= the normal quantile at a 0.1% false-alarm level, Bonferroni over the (e, K) cells.
Also reported: each cell's mean traces and the relative difference of the means. Exit status 0 when they agree,
1 when they do not, 2 on bad input.

  python scripts/compare_tracecov_runs.py gpu/tracecov_x_per_prompt.csv results/demo/tracecov_y_per_prompt.csv
"""

import csv
import math
from dataclasses import dataclass
from statistics import NormalDist

from grpo_mse import cli
from grpo_mse.cli import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json

LEVEL = 0.001


def read_traces(path: str) -> dict[tuple[str, int, str], float]:
    """{(estimator, K, prompt id): trace} from a run's ``*_per_prompt.csv``."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise cli.UsageError(f"file not found: {path}") from None
    require(bool(rows) and {"id", "K", "estimator", "trace"} <= set(rows[0]), f"{path}: not a per-prompt CSV")
    return {(row["estimator"], int(row["K"]), row["id"]): float(row["trace"]) for row in rows}


def compare(a: dict, b: dict, level: float = LEVEL) -> dict:
    """The paired agreement report of two runs' per-prompt traces (see the module docstring)."""
    cells: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for key, value in a.items():
        if key in b:
            cells.setdefault(key[:2], []).append((value, b[key]))
    cells = {cell: pairs for cell, pairs in cells.items() if len(pairs) >= 2}
    require(bool(cells), "the two runs share no (estimator, K) with at least 2 common prompts")
    limit = NormalDist().inv_cdf(1 - level / (2 * len(cells)))
    report = []
    for (name, k), pairs in sorted(cells.items()):
        n = len(pairs)
        diffs = [x - y for x, y in pairs]
        mean = sum(diffs) / n
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        z = 0.0 if sd == 0 and mean == 0 else (math.copysign(math.inf, mean) if sd == 0 else mean / (sd / math.sqrt(n)))
        mean_a, mean_b = sum(x for x, _ in pairs) / n, sum(y for _, y in pairs) / n
        report.append(
            {
                "estimator": name,
                "K": k,
                "prompts": n,
                "mean_a": mean_a,
                "mean_b": mean_b,
                "relative_difference": (mean_a - mean_b) / max(abs(mean_b), 1e-300),
                "mean_difference": mean,
                "se_mean_difference": sd / math.sqrt(n),
                "z": z,
            }
        )
    worst = max(abs(cell["z"]) for cell in report)
    return {"cells": report, "max_abs_z": worst, "z_limit": limit, "level": level, "agree": worst <= limit}


@dataclass(kw_only=True)
class CompareRunsConfig(Flags):
    """The two runs' per-prompt tables to compare and where the report goes."""

    run_a: str = option(help="a run's *_per_prompt.csv", positional=True)
    run_b: str = option(help="the run to compare with (e.g. results/demo/tracecov_*_per_prompt.csv)", positional=True)
    out: str | None = option(None, help="also write the report as JSON here")


def main(argv=None) -> int:
    args = CompareRunsConfig.from_argv(argv, description=__doc__)
    if args.out:
        cli.writable_file(args.out, "--out")
    report = compare(read_traces(args.run_a), read_traces(args.run_b))
    report.update(a=args.run_a, b=args.run_b)
    for cell in report["cells"]:
        print(
            f"{cell['estimator']:>8s} K={cell['K']:<3d} {cell['prompts']} prompts: mean trace {cell['mean_a']:.4g} vs "
            f"{cell['mean_b']:.4g} ({cell['relative_difference']:+.1%}), paired z {cell['z']:+.2f}"
        )
    print(
        f"largest |z| {report['max_abs_z']:.2f} (limit {report['z_limit']:.2f}): "
        f"{'agree' if report['agree'] else 'DISAGREE'}"
    )
    if args.out:
        write_json(args.out, report)
    return 0 if report["agree"] else 1


if __name__ == "__main__":
    cli.run(main)
