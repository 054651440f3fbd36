"""The MSE ratios of a tracecov run pooled over its group sizes, with prompt-bootstrap intervals.

For each pair (GRPO/oracle, vanilla/oracle, vanilla/GRPO) present in the run's per-prompt CSV: the geometric mean
over K of the ratio of mean MSEs, exp((1/n_K) sum_K ln(mean_a,K / mean_b,K)), with percentile intervals from
prompt-bootstrap replicates that resample prompts once for all K; at 95% and at the Bonferroni level over the
pairs (1 - 0.05 / pairs). The pre-registered pooled test of results/real_llm/qwen_coder_05b/powered/README.md.

  python scripts/pooled_ratio.py --per_prompt RUN_per_prompt.csv --out pooled.json
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json
from studies.audits.per_prompt import mse_table, per_k_ratios, pooled_ratio

PAIRS = (("grpo", "oracleV"), ("naive", "oracleV"), ("naive", "grpo"))


@dataclass(kw_only=True)
class PooledRatioConfig(Flags):
    """The run's per-prompt CSV, the bootstrap and the output."""

    per_prompt: str = option(help="the run's *_per_prompt.csv (run_tracecov.py)")
    resamples: int = option(20000, minimum=100, help="bootstrap resamples over prompts")
    seed: int = option(0, help="bootstrap seed")
    run_seed: int = option(
        0, help="the run's --seed: the per-K intervals use the run's own 2,000 replicates (its printed 95%% intervals)"
    )
    out: str | None = option(None, help="also write the report as JSON here")


def main(argv=None) -> None:
    args = PooledRatioConfig.from_argv(argv, description=__doc__)
    table = mse_table(args.per_prompt)
    present = set.intersection(*(set(mse) for mse in table.values()))
    pairs = [(top, bottom) for top, bottom in PAIRS if {top, bottom} <= present]
    require(bool(pairs), f"--per_prompt {args.per_prompt}: no pair of naive, grpo, oracleV to compare")
    bonferroni = 1 - 0.05 / len(pairs)
    report = {"per_prompt": args.per_prompt, "resamples": args.resamples, "seed": args.seed, "pooled": []}
    for top, bottom in pairs:
        result = pooled_ratio(table, top, bottom, args.resamples, args.seed, levels=(0.95, bonferroni))
        report["pooled"].append(result)
        low, high = result["intervals"]["0.95"]
        wide_low, wide_high = result["intervals"][f"{bonferroni:g}"]
        print(
            f"{top}/{bottom} pooled over K {result['K_list']}: {result['estimate']:.3f} 95% [{low:.3f}, {high:.3f}] "
            f"{bonferroni:.2%} [{wide_low:.3f}, {wide_high:.3f}] ({result['prompts']} prompts)"
        )
    # the per-K ratios: the run's 95% intervals again, and the Bonferroni level over every (pair, K) beside them
    cells = len(pairs) * len(table)
    wide = 1 - 0.05 / cells
    report["per_k"] = {"bonferroni_level": wide, "run_seed": args.run_seed, "ratios": {}}
    for top, bottom in pairs:
        rows = per_k_ratios(table, top, bottom, args.run_seed, levels=(0.95, wide))
        report["per_k"]["ratios"][f"{top}/{bottom}"] = rows
        for row in rows:
            (low, high), (wide_low, wide_high) = row["intervals"]["0.95"], row["intervals"][f"{wide:g}"]
            print(
                f"{top}/{bottom} K={row['K']}: {row['estimate']:.3f} 95% [{low:.3f}, {high:.3f}] "
                f"{wide:.2%} [{wide_low:.3f}, {wide_high:.3f}]"
            )
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    cli.run(main)
