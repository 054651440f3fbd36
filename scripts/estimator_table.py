"""Estimator comparison table: exact (scripts/exact_theory.py) against Monte Carlo (run_tracecov.py).

For each K and estimator (naive, grpo, oracleV, grpo_std, drgrpo): tr Cov, bias^2 and MSE, exact and measured,
with the run's 95% half-widths and a paired z-score per quantity; then the advisor's c1, c2, c3, K* against
their exact values. The run must use the theory's prompts with --max_new_tokens 1 --top_p 1 (same temperature).

  OUT_DIR/estimator_table.csv   one row per (K, estimator): studies.exact.estimator_table.COLUMNS
  OUT_DIR/estimator_table.md    the same as markdown, plus the advisor table
  OUT_DIR/advisor_check.json    exact vs estimated constants and whether each exact value is inside its interval
"""

import os
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import read_json, write_atomic, write_csv, write_json


@dataclass(kw_only=True)
class EstimatorTableConfig(Flags):
    """The exact theory and the Monte Carlo run to compare, and where the tables go."""

    theory: str = option(help="theory JSON of scripts/exact_theory.py")
    tracecov: str = option(help="main JSON of run_tracecov.py (its *_per_prompt.csv beside it)")
    out_dir: str = option("results/estimators", help="output folder")

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.writable_dir(self.out_dir, "--out_dir")


def main(argv=None) -> None:
    args = EstimatorTableConfig.from_argv(argv, description=__doc__)
    from studies.exact import estimator_table as table  # torch loads after the flags are checked

    theory = read_json(args.theory, ("K_list", "per_prompt", "scaling_constants"), "theory")
    run = read_json(args.tracecov, ("K_list", "conditional_on_x"), "run_tracecov.py main")
    csv_path = table.per_prompt_path(args.tracecov)
    if not os.path.isfile(csv_path):
        raise FileNotFoundError(f"per-prompt table not found: {csv_path}")
    names = [n for n in run["conditional_on_x"] if n in theory["trace_cov"]]
    rows = table.comparison_rows(theory, table.read_per_prompt(csv_path), names)
    require(bool(rows), "the run and the theory share no (K, estimator, prompt id)")
    check = table.advisor_check(theory, run)
    write_csv(os.path.join(args.out_dir, "estimator_table.csv"), rows, table.COLUMNS)
    write_atomic(os.path.join(args.out_dir, "estimator_table.md"), table.markdown(rows, check))
    if check:
        write_json(os.path.join(args.out_dir, "advisor_check.json"), check.to_json())
    print(table.markdown(rows, check), end="")
    print(f"wrote {args.out_dir}/estimator_table.csv, estimator_table.md" + (", advisor_check.json" if check else ""))


if __name__ == "__main__":
    cli.run(main)
