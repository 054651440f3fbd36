"""The sketched engine against the fast engine as users meet them: run_tracecov.py twice on the same samples (same
model, table, seed and flags; one engine after the other, so each peak is its own), then side by side: wall time,
the printed memory plan and the measured peak (VmHWM, the run's own ``memory: peak`` line) with their ratios, and
the agreement of the numbers: every prompt's MSE per K and estimator against the fast engine's, in units of the
sketch's own per-prompt error (the spread of its blocks, t with R - 1 degrees of freedom), and each paired ratio
of the fast run beside the sketched run's with its interval and the sketch's own sd.

  python scripts/bench_sketched.py --model "$(python scripts/real_llm.py qwen)" \\
      --oracle_table results/real_llm/qwen_coder_05b/zero_shot_mid.jsonl --T 2 --M 2 --K_list 4 \\
      --out results/benchmarks/sketched_qwen05b_T2.json

The runs write into a temporary folder; --out gets the comparison (JSON).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from grpo_mse.errors import UsageError
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T3_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365}  # t quantiles, R - 1 df


@dataclass(kw_only=True)
class BenchSketchedConfig(Flags):
    """The model, the prompts and the run's shape; both engines get the same flags."""

    model: str = option(help="--model of both runs")
    oracle_table: str = option(help="--oracle_table of both runs")
    T: int = option(2, minimum=1, help="prompts")
    M: int = option(2, minimum=2, help="groups per prompt")
    K_list: list[int] = option([4], type=int, nargs="+", minimum=2, help="group sizes")
    seed: int = option(0, minimum=0, help="both runs' seed (the same samples)")
    dtype: str = option("fp32", choices=("fp32", "bf16", "fp16"), help="model dtype")
    sketch_flags: str = option("", help='extra flags of the sketched run only (e.g. "--sketch_dim 262144")')
    out: str = option(help="the comparison's JSON")


PLAN = re.compile(r"memory: about ([0-9.e+-]+) GB needed")
PEAK = re.compile(r"memory: peak ([0-9.e+-]+) GB")


@dataclass
class EngineRun:
    engine: str
    wall_s: float
    planned_gb: float
    peak_gb: float
    result: dict
    prompts: dict  # {K: [prompt record JSON]}


def run_engine(config: BenchSketchedConfig, engine: str, folder: str) -> EngineRun:
    """run_tracecov.py with ``engine``; its printed plan and peak, its result and per-prompt records."""
    out = os.path.join(folder, engine)
    argv = [
        sys.executable,
        os.path.join(ROOT, "Gradient_evaluation", "run_tracecov.py"),
        *("--model", config.model, "--oracle_table", config.oracle_table, "--device", "cpu", "--dtype", config.dtype),
        *("--T", str(config.T), "--M", str(config.M), "--K_list", *map(str, config.K_list), "--seed", str(config.seed)),
        *("--no_advisor", "--skip_plot", "--save_json", out, "--engine", engine),
        *(config.sketch_flags.split() if engine == "sketched" else []),
    ]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"the {engine} run failed ({done.returncode}): {last}; run its command alone to see why")
    (path,) = glob.glob(os.path.join(out, "tracecov_*[0-9].json"))
    with open(path, encoding="utf-8") as f:
        result = json.load(f)
    prompts = {}
    for k in config.K_list:
        (detailed,) = glob.glob(os.path.join(out, f"*_K{k}_detailed.json"))
        with open(detailed, encoding="utf-8") as f:
            prompts[k] = json.load(f)["prompt_results"]
    planned, peak = float(PLAN.search(done.stderr).group(1)), float(PEAK.search(done.stderr).group(1))
    return EngineRun(engine, wall, planned, peak, result, prompts)


def prompt_agreement(fast: EngineRun, sketched: EngineRun) -> dict:
    """Each prompt's sketched MSE minus the fast engine's, over the sketch's own error of that prompt."""
    cells = []
    for k, records in sketched.prompts.items():
        for estimate, exact in zip(records, fast.prompts[k]):
            for name, blocks in estimate["sketch_mse"].items():
                r = len(blocks)
                center = sum(blocks) / r
                sd = math.sqrt(sum((b - center) ** 2 for b in blocks) / (r - 1) / r)
                truth = (exact.get("mse") or exact["tr_cov"])[name]
                cells.append(
                    {"K": k, "id": estimate["id"], "estimator": name, "fast": truth, "sketched": center, "sd": sd}
                )
    scored = [c for c in cells if c["sd"] > 0]
    for c in scored:
        c["t"] = (c["sketched"] - c["fast"]) / c["sd"]
    blocks = len(next(iter(sketched.prompts.values()))[0]["sketch_mse"]["oracleV"]) if cells else 2
    limit = T3_975.get(blocks - 1, 1.96)
    relative = [abs(c["sketched"] - c["fast"]) / abs(c["fast"]) for c in cells if c["fast"]]
    return {
        "cells": cells,
        "t_limit_95": limit,
        "share_beyond_95": sum(abs(c["t"]) > limit for c in scored) / max(len(scored), 1),
        "largest_abs_t": max((abs(c["t"]) for c in scored), default=math.nan),
        "largest_relative_difference": max(relative, default=math.nan),
    }


def paired_agreement(fast: EngineRun, sketched: EngineRun) -> dict:
    """Each paired ratio: the fast run's estimate beside the sketched run's estimate, interval and sketch sd."""
    out = {}
    ratio_sd = sketched.result["sketch_error"]["ratio_sd"]
    for name, per_k in sketched.result["paired"]["ratio"].items():
        rows = []
        for position, (cell, exact) in enumerate(zip(per_k, fast.result["paired"]["ratio"][name])):
            low, high = cell["ci95"] or (None, None)  # no interval at T = 1 or 2
            rows.append(
                {
                    "K": sketched.result["K_list"][position],
                    "fast": exact["estimate"],
                    "sketched": cell["estimate"],
                    "sketched_ci95": [low, high],
                    "sketch_sd": ratio_sd.get(name, [math.nan] * len(per_k))[position],
                    "fast_within_interval": None if low is None else low <= exact["estimate"] <= high,
                }
            )
        out[name] = rows
    return out


def main(argv=None) -> None:
    config = BenchSketchedConfig.from_argv(argv, description=__doc__)
    with tempfile.TemporaryDirectory() as folder:
        fast = run_engine(config, "fast", folder)
        sketched = run_engine(config, "sketched", folder)
    comparison = {
        "flags": {"T": config.T, "M": config.M, "K_list": config.K_list, "seed": config.seed, "dtype": config.dtype},
        "model": os.path.basename(config.model),
        "sketch": {name: sketched.result["config"][name] for name in ("sketch_dim", "sketch_blocks", "sketch_seed")},
        "runs": {
            run.engine: {"wall_s": run.wall_s, "planned_gb": run.planned_gb, "peak_gb": run.peak_gb}
            for run in (fast, sketched)
        },
        "ratios": {
            "peak_sketched_over_fast": sketched.peak_gb / fast.peak_gb,
            "wall_sketched_over_fast": sketched.wall_s / fast.wall_s,
            "sketched_plan_over_peak": sketched.planned_gb / sketched.peak_gb,
        },
        "sketch_error": sketched.result["sketch_error"],
        "prompts": prompt_agreement(fast, sketched),
        "paired": paired_agreement(fast, sketched),
        "code": sketched.result.get("code"),
    }
    write_json(config.out, comparison)
    runs, ratios, prompts = comparison["runs"], comparison["ratios"], comparison["prompts"]
    for engine, numbers in runs.items():
        print(
            f"{engine:8s} wall {numbers['wall_s']:.1f} s  planned {numbers['planned_gb']:.3g} GB  "
            f"peak {numbers['peak_gb']:.3g} GB"
        )
    print(
        f"sketched/fast: peak x{ratios['peak_sketched_over_fast']:.2f}, wall x{ratios['wall_sketched_over_fast']:.2f}; "
        f"sketched plan/peak x{ratios['sketched_plan_over_peak']:.2f}"
    )
    print(
        f"per-prompt MSEs: largest |t| {prompts['largest_abs_t']:.2f} (95% limit {prompts['t_limit_95']}), "
        f"{prompts['share_beyond_95']:.0%} beyond; "
        f"largest relative difference {prompts['largest_relative_difference']:.2g}"
    )
    print(f"saved {config.out}")
