"""Do two oracle tables (calculate_oracle_v.py outputs) estimate the same V(x)? E.g. HF against vLLM sampling.

Per prompt (matched by id), d = V_a - V_b with standard error sqrt(V_a (1 - V_a) / n_a + V_b (1 - V_b) / n_b)
(each V a binomial proportion; a V of 0 or 1 counts as 0.5/n successes from the boundary, so that se > 0).
They agree when both hold at a 0.1% false-alarm level each:
- the mean difference over prompts: |mean d| <= z_{0.9995} se(mean d), se(mean d) = sqrt(sum se_i^2) / T;
- every prompt: |d_i| / se_i <= z at level 0.001 / T (Bonferroni over the T prompts).
Exit status 0 when they agree, 1 when they do not, 2 on bad input.

  python scripts/compare_oracle_tables.py hf.jsonl vllm.jsonl --out agreement.json
"""

import math
from dataclasses import dataclass
from statistics import NormalDist

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.inputs import load_rows
from grpo_mse.tables.outputs import write_json
from grpo_mse.tables.records import N_ORACLE, V_ORACLE, oracle_count, oracle_value

LEVEL = 0.001


def proportion(row: dict, path: str) -> tuple[float, int]:
    """(V, n) of one oracle row, V kept off 0 and 1 by half a success."""
    require(V_ORACLE in row and N_ORACLE in row, f"{path}: row {row.get('id')} has no V_oracle/n_oracle")
    n = int(oracle_count(row))
    require(n >= 1, f"{path}: row {row.get('id')} has n_oracle {n}")
    value = oracle_value(row)
    require(0.0 <= value <= 1.0, f"{path}: row {row.get('id')} has V_oracle {value} outside [0, 1]")
    return min(max(value, 0.5 / n), 1 - 0.5 / n), n


def compare(rows_a: list[dict], rows_b: list[dict], path_a: str = "a", path_b: str = "b", level: float = LEVEL) -> dict:
    """The agreement report of two oracle tables (see the module docstring)."""
    by_id = {row["id"]: row for row in rows_b if "id" in row}
    pairs = [(row, by_id[row["id"]]) for row in rows_a if row.get("id") in by_id]
    require(bool(pairs), f"{path_a} and {path_b} share no prompt id")
    prompts, total_var = [], 0.0
    for row_a, row_b in pairs:
        (va, na), (vb, nb) = proportion(row_a, path_a), proportion(row_b, path_b)
        var = va * (1 - va) / na + vb * (1 - vb) / nb
        d = oracle_value(row_a) - oracle_value(row_b)
        prompts.append(
            {
                "id": row_a["id"],
                "V_a": oracle_value(row_a),
                "V_b": oracle_value(row_b),
                "difference": d,
                "z": d / math.sqrt(var),
            }
        )
        total_var += var
    count = len(prompts)
    mean = sum(p["difference"] for p in prompts) / count
    se_mean = math.sqrt(total_var) / count
    z_mean_limit = NormalDist().inv_cdf(1 - level / 2)
    z_prompt_limit = NormalDist().inv_cdf(1 - level / (2 * count))
    worst = max(abs(p["z"]) for p in prompts)
    agree = abs(mean) <= z_mean_limit * se_mean and worst <= z_prompt_limit
    return {
        "a": path_a,
        "b": path_b,
        "prompts": count,
        "mean_difference": mean,
        "se_mean_difference": se_mean,
        "mean_interval": [mean - z_mean_limit * se_mean, mean + z_mean_limit * se_mean],
        "max_abs_z": worst,
        "z_limit_per_prompt": z_prompt_limit,
        "level": level,
        "agree": agree,
        "per_prompt": prompts,
    }


@dataclass(kw_only=True)
class CompareOracleConfig(Flags):
    """The two oracle tables to compare and where the report goes."""

    table_a: str = option(help="oracle table (.jsonl/.parquet)", positional=True)
    table_b: str = option(help="oracle table to compare with", positional=True)
    out: str | None = option(None, help="also write the report as JSON here")


def main(argv=None) -> int:
    args = CompareOracleConfig.from_argv(argv, description=__doc__)
    if args.out:
        cli.writable_file(args.out, "--out")
    report = compare(load_rows(args.table_a), load_rows(args.table_b), args.table_a, args.table_b)
    low, high = report["mean_interval"]
    print(
        f"{report['prompts']} prompts: mean V difference {report['mean_difference']:+.4f} "
        f"(99.9% interval {low:+.4f} .. {high:+.4f}), largest per-prompt |z| {report['max_abs_z']:.2f} "
        f"(limit {report['z_limit_per_prompt']:.2f}): {'agree' if report['agree'] else 'DISAGREE'}"
    )
    if args.out:
        write_json(args.out, report)
    return 0 if report["agree"] else 1
