"""Do two trace-of-covariance runs (run_tracecov.py outputs) estimate the same traces? E.g. a CUDA run against the
committed CPU run (results/demo), on the prompts they share. First, are they runs of the same prompts and model
(each prompt's hash in the CSV, the fingerprints in the run's JSON beside it) and is each CSV its run's own? If
not: refused (exit 2, one line; studies.audits.run_provenance). Then per estimator and K two paired t tests over
the prompts: the difference of the traces and the log of their ratio (0.1% false-alarm level, Bonferroni over
all). Runs agree (exit 0) when no test passes its limit and every cell could have seen a common factor of
1 + --tolerance either way; when no test passes its limit but some cell could not: "cannot tell" (exit 3). They
differ (exit 1) when a test passes its limit, or when their (estimator, K, prompt) sets differ unless
--shared_prompts (a shorter run of the same table and seed against a longer one). With --rtol, a rerun of the
same settings and seeds (another machine): every (estimator, K) mean trace within that relative tolerance of the
other's (the committed results hold to studies.audits.run_agreement.RERUN_RTOL = 1%). Prompts pair by id, or,
in a table whose ids repeat, by position in the run and id. The criteria: studies.audits.run_agreement.

  python scripts/compare_tracecov_runs.py gpu/tracecov_x_per_prompt.csv results/demo/tracecov_y_per_prompt.csv \
      --shared_prompts
  python scripts/compare_tracecov_runs.py rerun/tracecov_x_per_prompt.csv results/demo/tracecov_y_per_prompt.csv \
      --rtol 0.01
"""

import math
import sys
from dataclasses import dataclass, replace

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json
from studies.audits.run_agreement import (
    AGREE,
    CANNOT_TELL,
    DIFFER,
    TOLERANCE,
    Cell,
    compare,
    paired,
    pairs_by_id,
    read_traces,
)
from studies.audits.run_provenance import check_own_json, check_same_run_inputs, read_source


@dataclass(kw_only=True)
class CompareRunsConfig(Flags):
    """The two runs' per-prompt tables to compare and where the report goes."""

    run_a: str = option(help="a run's *_per_prompt.csv", positional=True)
    run_b: str = option(help="the run to compare with (e.g. results/demo/tracecov_*_per_prompt.csv)", positional=True)
    out: str | None = option(None, help="also write the report as JSON here")
    rtol: float | None = option(
        None,
        above=0,
        help="a rerun of the same settings and seeds: agree when every per-K mean trace is within this relative "
        "tolerance (the committed results hold to 0.01 across machines); default: the paired z test",
    )
    tolerance: float | None = option(
        None,
        above=0,
        help=f"agree only when every (estimator, K) could have seen every prompt's trace times 1 + this (or divided "
        f"by it): the log ratio's limit times its standard error; else 'cannot tell' (exit 3); default {TOLERANCE}",
    )
    shared_prompts: bool = option(
        False,
        help="compare on the prompts both runs hold (a shorter run of the same table and seed against a longer "
        "one); default: runs whose prompts, estimators or K differ do not agree",
    )


def main(argv=None) -> int:
    args = CompareRunsConfig.from_argv(argv, description=__doc__)
    require(args.rtol is None or args.tolerance is None, "--tolerance is for the paired tests; --rtol has its own")
    if args.out:
        cli.writable_file(args.out, "--out")
    traces = read_traces(args.run_a), read_traces(args.run_b)
    a, b = paired(*traces, f"{args.run_a} and {args.run_b}")
    sources = read_source(args.run_a), read_source(args.run_b)
    for source, run in zip(sources, traces):
        check_own_json(source, run)
    notes = check_same_run_inputs(*sources, pairs_by_id(*traces))
    tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    report = compare(a, b, rtol=args.rtol, shared_only=args.shared_prompts, tolerance=tolerance)
    report = replace(report, a=args.run_a, b=args.run_b, notes=notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for cell in report.cells:
        print(cell_line(cell))
    verdict = {AGREE: "agree", DIFFER: "DISAGREE", CANNOT_TELL: "cannot tell"}[report.verdict]
    if report.only_a or report.only_b:
        counts = (
            f"{report.only_a} (estimator, K, prompt) traces only in {args.run_a}, {report.only_b} only in {args.run_b}"
        )
        print(f"{counts}: " + ("compared on the shared ones" if report.shared_only else "the runs differ"))
        verdict += "" if report.shared_only else " (their prompts differ; --shared_prompts compares the shared ones)"
    if args.rtol is None:
        print(
            f"largest |z| / limit {report.max_z_share:.2f}; the smallest factor every cell detects "
            f"{factor(report.max_detectable)} (--tolerance {tolerance:g}: x{1 + tolerance:g}): {verdict}"
        )
        if report.verdict == CANNOT_TELL:
            worst = max(report.cells, key=lambda cell: cell.detectable)
            print(
                f"no difference found, but {worst.estimator} at K {worst.K} detects {factor(worst.detectable)} "
                f"({worst.log_prompts} prompts with traces > 0 in both): more prompts, or a larger --tolerance"
            )
    else:
        print(f"largest relative difference {report.max_abs_relative_difference:.2%} (rtol {args.rtol:g}): {verdict}")
    if args.out:
        write_json(args.out, report.to_json())
    return {AGREE: 0, DIFFER: 1, CANNOT_TELL: 3}[report.verdict]


def factor(detectable: float) -> str:
    """A detectable relative difference as the factor it stands for (x1.5), "none" when no factor is."""
    return "none" if math.isinf(detectable) else f"x{1 + detectable:.3g}"


def cell_line(cell: Cell) -> str:
    """One (estimator, K)'s line: the mean traces, each test's z and limit, what the log ratio detects."""
    line = (
        f"{cell.estimator:>8s} K={cell.K:<3d} {cell.prompts} prompts: mean trace {cell.mean_a:.4g} vs "
        f"{cell.mean_b:.4g} ({cell.relative_difference:+.1%}), paired z {cell.z:+.3g} (limit {cell.z_limit:.3g})"
    )
    if cell.z_log is None:
        return line + f"; log ratio: {cell.log_prompts} prompts with traces > 0 in both, too few"
    return (
        line + f"; log ratio over {cell.log_prompts}: z {cell.z_log:+.3g} (limit {cell.z_log_limit:.3g}), "
        f"detects {factor(cell.detectable)}"
    )


if __name__ == "__main__":
    cli.run(main)
