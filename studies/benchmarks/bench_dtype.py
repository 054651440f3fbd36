"""fp32 against bf16 on the CPU, through the real command lines: speed and agreement (issue 34, item 4).

Both dtypes run calculate_oracle_v.py on the first T rows of --oracle_table and run_tracecov.py on that table
(the same seed, one thread each, alternately). Reported: each command's wall seconds and the fp32 / bf16 ratio;
the oracle's V per prompt and the mean paired difference bf16 - fp32 with its 95% normal interval; for every
(estimator, K) the two runs' mean traces, their relative difference, the paired z of
studies.audits.run_agreement, and the fp32 run's own 95% half-width (relative), so that "within the
intervals" can be read off: a dtype whose difference is inside the fp32 run's own interval changes no result.

  python scripts/bench_dtype.py --model "$(python scripts/real_llm.py)" \
      --oracle_table results/benchmarks/smollm2_zero_shot_top4.jsonl --T 4 --M 4 --K_list 4 \
      --out results/benchmarks/cpu_dtype_smollm2.json
"""

import glob
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass

from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.tables.outputs import write_json
from studies.audits import run_agreement
from studies.benchmarks.bench_cli import ORACLE, ROOT, TRACECOV, latest, timed
from studies.command_line import protect_tracked

DTYPES = ("fp32", "bf16")
Z95 = 1.959963984540054


@dataclass(kw_only=True)
class BenchDtypeConfig(Flags):
    """The policy, its prompts, the run's sizes and where the report goes."""

    model: str = option(help="local model: an HF folder, a GGUF file or a LoRA adapter folder")
    oracle_table: str = option(help="oracle table (.jsonl) whose prompts both dtypes run")
    T: int = option(4, minimum=2, help="prompts (the oracle's first T rows; run_tracecov's T)")
    M: int = option(4, minimum=2, help="groups per prompt")
    K_list: list[int] = option([4], help="group sizes")
    n_oracle: int = option(32, minimum=1, help="oracle samples per prompt")
    max_new_tokens: int = option(32, help="tokens per continuation")
    seed: int = option(0, help="both dtypes' seed (the same random streams)")
    out: str = option(os.path.join(ROOT, "results", "benchmarks", "cpu_dtype.json"), help="report")
    overwrite: bool = option(False, help="replace a --out file tracked by git (the committed one)")


def parse_args(argv=None) -> BenchDtypeConfig:
    args = BenchDtypeConfig.from_argv(argv, description=__doc__)
    protect_tracked(args.out, args.overwrite, "--out")
    require(check_model_path(args.model), f"--model {args.model}: give a local model (folder or GGUF file)")
    require(os.path.isfile(args.oracle_table), f"--oracle_table not found: {args.oracle_table}")
    return args


def common_flags(args, dtype: str) -> list[str]:
    return [
        "--model",
        args.model,
        "--device",
        "cpu",
        "--dtype",
        dtype,
        "--seed",
        str(args.seed),
        "--max_new_tokens",
        str(args.max_new_tokens),
    ]


def oracle_values(args, dtype: str, out_dir: str) -> tuple[float, dict[str, float]]:
    """calculate_oracle_v.py in ``dtype``: its wall seconds and {prompt id: V}."""
    seconds = timed(
        [sys.executable, ORACLE, *common_flags(args, dtype), "--dataset", args.oracle_table, "--limit", str(args.T)]
        + ["--n_oracle", str(args.n_oracle), "--out_dir", out_dir]
    )
    with open(latest(os.path.join(out_dir, "oracle_v_*.jsonl")), encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return seconds, {str(row["id"]): float(row["V_oracle"]) for row in rows}


def tracecov_run(args, dtype: str, out_dir: str) -> tuple[float, dict, str]:
    """run_tracecov.py in ``dtype``: its wall seconds, its main JSON and its per-prompt CSV."""
    seconds = timed(
        [sys.executable, TRACECOV, *common_flags(args, dtype), "--oracle_table", args.oracle_table]
        + ["--T", str(args.T), "--M", str(args.M), "--K_list", *map(str, args.K_list)]
        + ["--skip_plot", "--save_json", out_dir]
    )
    (main_json,) = glob.glob(os.path.join(out_dir, "tracecov_*[0-9].json"))
    with open(main_json, encoding="utf-8") as handle:
        summary = json.load(handle)
    return seconds, summary, latest(os.path.join(out_dir, "tracecov_*_per_prompt.csv"))


def paired_difference(a: dict[str, float], b: dict[str, float]) -> dict:
    """Mean of b - a over the keys both hold, with its 95% normal interval (prompts as the units)."""
    diffs = [b[key] - a[key] for key in a if key in b]
    n = len(diffs)
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else math.nan
    return {"prompts": n, "mean_difference": mean, "ci95": [mean - Z95 * se, mean + Z95 * se]}


def main(argv=None) -> None:
    args = parse_args(argv)
    report = {
        "settings": {
            "model": os.path.basename(args.model.rstrip("/")),
            "oracle_table": os.path.relpath(args.oracle_table, ROOT),
            **{name: getattr(args, name) for name in ("T", "M", "K_list", "n_oracle", "max_new_tokens", "seed")},
            "device": "cpu",
            "threads": 1,
        },
        "machine": {"cpu_count": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]},
    }
    seconds, values, summaries, csvs = {}, {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_dtype_") as work:
        for dtype in DTYPES:  # alternating commands, so a change of the machine's load hits both dtypes
            seconds[f"oracle_{dtype}"], values[dtype] = oracle_values(args, dtype, os.path.join(work, f"o_{dtype}"))
            print(f"oracle {dtype}: {seconds[f'oracle_{dtype}']:.1f} s", flush=True)
        for dtype in DTYPES:
            seconds[f"tracecov_{dtype}"], summaries[dtype], path = tracecov_run(args, dtype, os.path.join(work, dtype))
            csvs[dtype] = run_agreement.read_traces(path)
            print(f"tracecov {dtype}: {seconds[f'tracecov_{dtype}']:.1f} s", flush=True)
    agreement = run_agreement.compare(csvs["bf16"], csvs["fp32"])
    fp32, cells = summaries["fp32"], []
    for cell in agreement.cells:  # each cell's record with the fp32 run's interval beside it
        at = fp32["K_list"].index(cell.K)
        mean, half = fp32["conditional_on_x"][cell.estimator][at], fp32["ci95"][cell.estimator][at]
        cells.append(
            {
                **cell.to_json(),
                "fp32_relative_half_width": half / abs(mean) if mean else math.nan,
                "within_fp32_interval": abs(cell.mean_a - cell.mean_b) <= half,
            }
        )
    saved = {name: round(value, 2) for name, value in seconds.items()}  # the ratios from the saved seconds: a
    report.update(  # reader recomputing them from the file gets the same numbers
        seconds=saved,
        speedup_bf16={part: round(saved[f"{part}_fp32"] / saved[f"{part}_bf16"], 2) for part in ("oracle", "tracecov")},
        oracle_V={**values, "bf16_minus_fp32": paired_difference(values["fp32"], values["bf16"])},
        traces={**agreement.to_json(), "cells": cells},
        within_intervals=all(cell["within_fp32_interval"] for cell in cells),
    )
    v, speedup = report["oracle_V"]["bf16_minus_fp32"], report["speedup_bf16"]
    print(
        f"bf16 / fp32 speed: oracle x{speedup['oracle']}, tracecov x{speedup['tracecov']}; "
        f"V bf16 - fp32 {v['mean_difference']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] ({v['prompts']} prompts)"
    )
    for cell in cells:
        relative = f"{cell['relative_difference']:+.1%}" if cell["mean_b"] else "fp32 trace 0"
        print(
            f"  {cell['estimator']:>8} K={cell['K']}: bf16 {cell['mean_a']:.4g} fp32 {cell['mean_b']:.4g} "
            f"({relative}; fp32's own 95% half-width {cell['fp32_relative_half_width']:.0%}), z {cell['z']:+.2f}"
        )
    write_json(args.out, report)
    print(f"wrote {args.out}")
