"""Do two trace-of-covariance runs (run_tracecov.py outputs) estimate the same traces? E.g. a CUDA run against the
committed CPU run (results/demo), on the prompts they share: paired z per estimator and K (0.1% false-alarm
level, Bonferroni over the cells). With --rtol, a rerun of the same settings and seeds (another machine): every
(estimator, K) mean trace within that relative tolerance of the other's (the committed results hold to
studies.audits.run_agreement.RERUN_RTOL = 1%). Also reported: each cell's mean traces and their relative
difference. Prompts pair by id, or, in a table whose ids repeat, by position in the run and id. Runs whose
(estimator, K, prompt) sets differ do not agree (exit 1) unless --shared_prompts (a shorter run of the same table
and seed against a longer one). Exit status 0 when they agree, 1 when they do not, 2 on bad input. The criteria:
studies.audits.run_agreement.

  python scripts/compare_tracecov_runs.py gpu/tracecov_x_per_prompt.csv results/demo/tracecov_y_per_prompt.csv \
      --shared_prompts
  python scripts/compare_tracecov_runs.py rerun/tracecov_x_per_prompt.csv results/demo/tracecov_y_per_prompt.csv \
      --rtol 0.01
"""

from dataclasses import dataclass, replace

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json
from studies.audits.run_agreement import compare, paired, read_traces


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
    shared_prompts: bool = option(
        False,
        help="compare on the prompts both runs hold (a shorter run of the same table and seed against a longer "
        "one); default: runs whose prompts, estimators or K differ do not agree",
    )


def main(argv=None) -> int:
    args = CompareRunsConfig.from_argv(argv, description=__doc__)
    if args.out:
        cli.writable_file(args.out, "--out")
    a, b = paired(read_traces(args.run_a), read_traces(args.run_b), f"{args.run_a} and {args.run_b}")
    report = compare(a, b, rtol=args.rtol, shared_only=args.shared_prompts)
    report = replace(report, a=args.run_a, b=args.run_b)
    for cell in report.cells:
        print(
            f"{cell['estimator']:>8s} K={cell['K']:<3d} {cell['prompts']} prompts: mean trace {cell['mean_a']:.4g} vs "
            f"{cell['mean_b']:.4g} ({cell['relative_difference']:+.1%}), paired z {cell['z']:+.2f}"
        )
    differ = bool(report.only_a or report.only_b)
    verdict = "agree" if report.agree else "DISAGREE"
    if differ:
        counts = (
            f"{report.only_a} (estimator, K, prompt) traces only in {args.run_a}, {report.only_b} only in {args.run_b}"
        )
        print(f"{counts}: " + ("compared on the shared ones" if report.shared_only else "the runs differ"))
        verdict += (
            ""
            if report.shared_only or report.agree
            else " (their prompts differ; --shared_prompts compares the shared ones)"
        )
    if args.rtol is None:
        print(f"largest |z| {report.max_abs_z:.2f} (limit {report.z_limit:.2f}): {verdict}")
    else:
        print(f"largest relative difference {report.max_abs_relative_difference:.2%} (rtol {args.rtol:g}): {verdict}")
    if args.out:
        write_json(args.out, report.to_json())
    return 0 if report.agree else 1


if __name__ == "__main__":
    cli.run(main)
