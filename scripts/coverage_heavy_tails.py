"""Coverage of the group-size advisor's 95% intervals (c1, c2, c3, K*) on heavy-tailed prompt populations.

Population: 30 exact prompt types (3 outcomes, one rewarded, explicit 4-d scores centred under p: every MSE and
c1, c3 is known in closed form, studies.exact.theory); each prompt of a run draws a type uniformly and a score
scale s independent of the type, so its MSEs are s^2 times its type's. Scale families (TAIL = FAMILY:PARAMETER):
lognormal:sigma (s = exp(sigma Z)), pareto:alpha (s = U^(-1/alpha) >= 1; alpha > 2), gamma:shape (s ~ Gamma(shape)),
student:nu (s = |t_nu|, nu > 2). Truth: c2 = E[s^2] mean_t sigma_O,t^2, c3 = E[s^2] mean_t c3_t,
c1 = E[s^2] mean_t ||g_t||^2 - E[s]^2 ||mean_t g_t||^2, K* = 1 + sqrt(c3/c1).
Each simulated run samples M groups of K per prompt, forms the per-prompt traces and c1 batches as run_tracecov
records them, and calls advisor.advise (intervals not widened); per run and statistic it keeps z = (estimate -
truth)/se on the interval's scale and the bootstrap-t quantiles, from which any widening's coverage follows. One
cell per (tail, T): coverage with its binomial Monte Carlo standard error, and quantiles of the run's Hill tail
index of the per-prompt c2 (advisor.tail_index) and largest-prompt share. --merge writes the advisor's calibration
table: the widening (standard errors added to each end, the smallest with <= 2.5% misses per end in every cell)
and per (tail, T) the widened coverage and the 5-95% range of the tail index, where the advisor applies that cell.

  python scripts/coverage_heavy_tails.py --tails lognormal:0 lognormal:0.5 lognormal:1 pareto:3 \
      --T 48 96 192 500 --runs 300 --out outputs/cells.json                    # simulate (per_run kept)
  python scripts/coverage_heavy_tails.py --merge outputs/cells.json --out outputs/coverage_calibration.json
  python scripts/coverage_heavy_tails.py --tails student:3 --T 48 128 192 500 --runs 300 \
      --check outputs/coverage_calibration.json --out outputs/check.json       # another generator
"""

import math
import os
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json
from studies.advisor.heavy_tails import (
    TARGET_MISS,
    Tail,
    calibration_cells,
    check,
    coverage,
    describe_check,
    fit_widening,
)


def tail(text: str) -> Tail:
    """argparse ``type``: FAMILY:PARAMETER with lognormal sigma >= 0, pareto alpha > 2, gamma shape > 0 or student
    nu > 2."""
    family, _, value = text.partition(":")
    try:
        parameter = float(value)
    except ValueError:
        parameter = math.nan
    bounds = {"lognormal": parameter >= 0, "pareto": parameter > 2, "gamma": parameter > 0, "student": parameter > 2}
    if not (bounds.get(family, False) and math.isfinite(parameter)):
        raise cli.BadValue(
            f"{text!r}: expected lognormal:SIGMA (>= 0), pareto:ALPHA (> 2), gamma:SHAPE (> 0) or student:NU (> 2)"
        )
    return Tail(family, parameter)


def read_cells(paths: list[str]) -> list[dict]:
    """The simulated cells (with ``per_run``) of earlier runs of this script."""
    from grpo_mse.tables.outputs import read_json

    cells = [cell for path in paths for cell in read_json(path, ("cells",), "simulated coverage")["cells"]]
    require(
        all("per_run_columns" in c for c in cells),
        "--merge/--raw files must be simulated cells with the t quantiles per run (per_run_columns; files written "
        "before the widening hold covered / not covered only)",
    )
    return cells


@dataclass(kw_only=True)
class CoverageConfig(Flags):
    """The simulated cells (prompts per run, runs, tails), the intervals, and the merge/check modes."""

    T: list[int] = option([48, 192, 500], minimum=16, help="prompts per run")
    runs: int = option(300, minimum=1, help="simulated runs per cell")
    tails: list[Tail] = option([tail("lognormal:1")], type=tail, nargs="+", help="score-scale laws, FAMILY:PARAMETER")
    n_boot: int = option(1000, minimum=50, help="bootstrap replicates")
    seed: int = option(2026, minimum=0, help="seed of the first cell (each cell's own is derived from it)")
    level: float = option(0.95, above=0, maximum=0.999, help="nominal level of the intervals")
    out: str | None = option(None, help="JSON file for the cells / table / check (default: print only)")
    merge: list[str] | None = option(None, help="simulated cell files -> the calibration table")
    check: str | None = option(None, help="calibration table to check the simulated cells against")
    raw: list[str] | None = option(None, help="--check: simulated cell files instead of simulating")


def main(argv=None) -> None:
    args = CoverageConfig.from_argv(argv, description=__doc__)
    if args.out:
        cli.writable_file(args.out, "--out")
    require(not (args.merge and args.check), "give --merge or --check, not both")
    require(not args.raw or args.check, "--raw needs --check")
    if args.check:
        require(os.path.isfile(args.check), f"--check {args.check}: no such file")
    if args.merge:
        require(bool(args.out), "--merge needs --out")
        raw = read_cells(args.merge)
        widening = fit_widening(raw)
        require(all(None not in w for w in widening.values()), f"no widening on the grid suffices: {widening}")
        table = calibration_cells(raw, widening)
        print("widening (d_lo, d_hi): " + "  ".join(f"{n}={w}" for n, w in widening.items()))
        for c in table:
            text = "  ".join(f"{n}={v['coverage']:.3f}+-{v['mc_se']:.3f}" for n, v in c["coverage"].items())
            low, high = c["index_range"]
            print(f"T={c['T']} {c['tail']} tail index {low:.2f}-{high:.2f} runs={c['runs']}: {text}")
        note = __doc__.split("\n\n")[1]
        write_json(args.out, {"widening": widening, "target_miss": TARGET_MISS, "cells": table, "note": note})
        return
    cells, checks = (read_cells(args.raw) if args.raw else []), []
    if not args.raw:
        for i, scale in enumerate(args.tails):
            for t in args.T:
                cell = coverage(t, args.runs, scale, args.n_boot, args.seed + 1000 * i + t, args.level)
                text = "  ".join(f"{n}={c['coverage']:.3f}+-{c['mc_se']:.3f}" for n, c in cell.coverage.items())
                share, index = cell.largest_share_quantiles, cell.tail_index_quantiles
                print(
                    f"T={t} {scale.label()} runs={args.runs} share q10-q90 {share['0.1']:.3f}-{share['0.9']:.3f} "
                    f"tail index q10-q90 {index['0.1']:.2f}-{index['0.9']:.2f}: " + text,
                    flush=True,
                )
                cells.append(cell.to_json())
    for cell in cells if args.check else []:
        checks.append(check(cell, args.check))
        print(f"check T={cell['T']} {cell['tail']}: " + describe_check(checks[-1]), flush=True)
    if args.out:
        kept = {} if args.raw else {"cells": cells}  # --raw: the cells are already in their files
        write_json(args.out, {**kept, "checks": [c.to_json() for c in checks], "note": __doc__.split("\n\n")[1]})


if __name__ == "__main__":
    cli.run(main)
