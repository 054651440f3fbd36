"""End to end through the real command lines: run_tracecov.py --engine fast against --engine reference.

Per case, both command lines run as subprocesses, alternately, --repeats times each, on one thread;
the minimum wall time of each engine and their ratio go to --out, with the largest relative
difference between the two engines' mean traces, the startup floor (the same command line with
T=1, M=2, K=2: imports, model load, outputs) and the --help time of each script. Cases:
zero_shot uses the demo's oracle table; few_shot builds an oracle table here with
calculate_oracle_v.py (first T rows of --few_shot_data, --n_oracle samples each; not timed).

  python scripts/bench_cli.py        # T=16, M=8, K 2 4 8 16, built-in policy -> results/benchmarks/cpu_cli.json
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.tables.outputs import write_json
from studies.command_line import protect_tracked

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
TRACECOV = os.path.join(ROOT, "Gradient_evaluation", "run_tracecov.py")
ORACLE = os.path.join(ROOT, "Gradient_evaluation", "calculate_oracle_v.py")
HELP_SCRIPTS = (
    "Gradient_evaluation/run_tracecov.py",
    "Gradient_evaluation/calculate_oracle_v.py",
    "plots/make_figures.py",
)
ENGINES = ("fast", "reference")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(kw_only=True)
class BenchCliConfig(Flags):
    """The policy, the cases and their sizes, the repeats, and where the report goes."""

    model: str = option(
        os.path.join(ROOT, "assets", "tiny_policy"),
        help="local model: an HF folder, a GGUF file or a LoRA adapter folder",
    )
    zero_shot_table: str | None = option(
        None, help="oracle table of the zero_shot case (default: results/demo/oracle_v_n256_tiny_policy_*.jsonl)"
    )
    few_shot_data: str = option(
        os.path.join(ROOT, "data", "arithmetic_few_shot.jsonl"),
        help="prompts of the few_shot case; their oracle table is built here",
    )
    n_oracle: int = option(64, minimum=1, help="samples per prompt of the few_shot oracle table")
    cases: list[str] = option(
        ["zero_shot", "few_shot"],
        choices=["zero_shot", "few_shot"],
        help="zero_shot: the demo's oracle table (or --zero_shot_table); few_shot: an oracle table of the first T "
        "rows of --few_shot_data built first with calculate_oracle_v.py (not timed)",
    )
    T: int = option(16, minimum=1, help="prompts")
    M: int = option(8, help="groups per prompt")
    K_list: list[int] = option([2, 4, 8, 16], help="group sizes")
    max_new_tokens: int = option(32, help="tokens per continuation")
    repeats: int = option(
        3, minimum=1, help="runs of each command line, alternating fast and reference; the minimum is reported"
    )
    out: str = option(os.path.join(ROOT, "results", "benchmarks", "cpu_cli.json"), help="report")
    overwrite: bool = option(False, help="replace a --out file tracked by git (the committed one)")


def parse_args(argv=None) -> BenchCliConfig:
    args = BenchCliConfig.from_argv(argv, description=__doc__)
    protect_tracked(args.out, args.overwrite, "--out")
    # the benchmark runs the command lines on a local model (a folder, a GGUF file or an adapter folder, as they
    # take it), never a hub download inside a timed run
    require(check_model_path(args.model), f"--model {args.model}: give a local model (folder or GGUF file)")
    if "zero_shot" in args.cases:
        args.zero_shot_table = args.zero_shot_table or latest(
            os.path.join(ROOT, "results", "demo", "oracle_v_n256_tiny_policy_*.jsonl")
        )
        require(os.path.isfile(args.zero_shot_table), f"zero-shot oracle table not found: {args.zero_shot_table}")
    if "few_shot" in args.cases:
        require(os.path.isfile(args.few_shot_data), f"--few_shot_data not found: {args.few_shot_data}")
    return args


def max_relative_difference(fast: dict, reference: dict, rtol_floor: float = 1e-9) -> float:
    """Largest |a - b| / max(|a|, |b|) over the engines' curves, where a pair below an absolute tolerance (1e-9 of
    the largest value in the run) counts as equal: 0.0 against 6.8e-13 is rounding, not a relative difference 1."""
    values = [abs(v) for n in reference for v in (*fast[n], *reference[n])]
    atol = rtol_floor * max(values, default=0.0)
    return max(
        (
            abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) > atol else 0.0
            for n in reference
            for a, b in zip(fast[n], reference[n])
        ),
        default=0.0,
    )


def latest(pattern: str) -> str:
    """The last file matching ``pattern`` in name order, or the pattern itself when none does."""
    found = sorted(glob.glob(pattern))
    return found[-1] if found else pattern


def timed(command: list[str]) -> float:
    """Wall seconds of ``command`` run on one thread; a failure raises with the command's last error line."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **ONE_THREAD})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{' '.join(command[1:3])}... failed (exit {done.returncode}): {last}")
    return seconds


def few_shot_table(args, work: str) -> str:
    """Oracle table of the first T few-shot prompts, built with calculate_oracle_v.py."""
    out_dir = os.path.join(work, "oracle_few_shot")
    timed(
        [
            sys.executable,
            ORACLE,
            "--model",
            args.model,
            "--dataset",
            args.few_shot_data,
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--limit",
            str(args.T),
            "--n_oracle",
            str(args.n_oracle),
            "--batch_size",
            "256",
            "--max_new_tokens",
            str(args.max_new_tokens),
            "--out_dir",
            out_dir,
        ]
    )
    return latest(os.path.join(out_dir, "oracle_v_*.jsonl"))


def tracecov_command(args, table: str, engine: str, out_dir: str, sizes=None) -> list[str]:
    """run_tracecov.py's command line; ``sizes`` = (T, M, K_list), by default the benchmark's."""
    t, m, k_list = sizes or (args.T, args.M, args.K_list)
    return [
        sys.executable,
        TRACECOV,
        "--model",
        args.model,
        "--oracle_table",
        table,
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--T",
        str(t),
        "--M",
        str(m),
        "--K_list",
        *map(str, k_list),
        "--max_new_tokens",
        str(args.max_new_tokens),
        "--engine",
        engine,
        "--skip_plot",
        "--save_json",
        out_dir,
    ]


def mean_traces(out_dir: str) -> dict:
    (main_json,) = glob.glob(os.path.join(out_dir, "tracecov_*[0-9].json"))
    with open(main_json, encoding="utf-8") as handle:
        return json.load(handle)["conditional_on_x"]


def run_case(args, table: str, work: str) -> dict:
    """Both engines' command lines, alternately; min seconds, their ratio, and how far the traces differ."""
    runs, traces, floor = {e: [] for e in ENGINES}, {e: [] for e in ENGINES}, []
    for repeat in range(args.repeats):
        for engine in ENGINES:
            out_dir = os.path.join(work, f"{engine}_{repeat}")
            runs[engine].append(round(timed(tracecov_command(args, table, engine, out_dir)), 3))
            traces[engine].append(mean_traces(out_dir))
        floor.append(timed(tracecov_command(args, table, "fast", os.path.join(work, f"floor_{repeat}"), (1, 2, [2]))))
    fast, reference = traces["fast"][0], traces["reference"][0]
    max_rel_diff = max_relative_difference(fast, reference)
    seconds = {e: min(runs[e]) for e in ENGINES}
    return {
        "seconds": seconds,
        "runs": runs,
        "speedup": round(seconds["reference"] / seconds["fast"], 2),
        "startup_seconds": round(min(floor), 3),
        "max_rel_diff_between_engines": max_rel_diff,
        "repeats_identical": all(t == traces[e][0] for e in ENGINES for t in traces[e]),
    }


def help_seconds(repeats: int) -> dict:
    """Min wall seconds of ``script --help`` for each script."""
    return {
        script: round(min(timed([sys.executable, os.path.join(ROOT, script), "--help"]) for _ in range(repeats)), 3)
        for script in HELP_SCRIPTS
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    report = {
        "settings": {
            "model": os.path.relpath(args.model, ROOT),
            "T": args.T,
            "M": args.M,
            "K_list": args.K_list,
            "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats,
            "device": "cpu",
            "dtype": "fp32",
            "threads": 1,
            "few_shot_n_oracle": args.n_oracle,
        },
        "machine": {"cpu_count": os.cpu_count(), "load_average_at_start": load},
        "help_seconds": help_seconds(args.repeats),
        "cases": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench_cli_") as work:
        for case in args.cases:
            table = args.zero_shot_table if case == "zero_shot" else few_shot_table(args, work)
            report["cases"][case] = run_case(args, table, os.path.join(work, case))
            result = report["cases"][case]
            print(
                f"{case}: fast {result['seconds']['fast']:.2f} s, reference {result['seconds']['reference']:.2f} s, "
                f"x{result['speedup']} (startup {result['startup_seconds']:.2f} s), "
                f"max rel diff {result['max_rel_diff_between_engines']:.2g}",
                flush=True,
            )
    print("--help: " + ", ".join(f"{os.path.basename(s)} {t:.2f} s" for s, t in report["help_seconds"].items()))
    write_json(args.out, report)
    print(f"wrote {args.out}")
