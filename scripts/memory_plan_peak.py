"""The memory plan a tracecov run prints against the peak it measures, through the real command line.

Each case (--dtypes x with and without the advisor) runs Gradient_evaluation/run_tracecov.py in a subprocess,
--repeats times, and records the two numbers the run prints (`memory: about N GB needed ...; at most W` before any
work, `memory: peak P GB` at its end), their ratio, and the subprocess's wall, user and system seconds.

  python scripts/memory_plan_peak.py --model "$(python scripts/real_llm.py qwen)" \\
      --oracle_table results/real_llm/qwen_coder_05b/zero_shot_mid.jsonl --T 2 --M 2 --K_list 4 8 \\
      --out results/benchmarks/qwen_memory_plan_peak.json
"""

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import UsageError
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json
from studies.benchmarks.tracecov_flags import thread_env, tracecov_argv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLAN = re.compile(r"memory: about ([\d.e+-]+) GB needed[^\n]*")
MOST = re.compile(r"; at most ([\d.e+-]+) if")
PEAK = re.compile(r"memory: peak ([\d.e+-]+) GB")


@dataclass(kw_only=True)
class MemoryPlanPeakConfig(Flags):
    """The policy and table, the run's sizes, the cases, the repeats and the output."""

    model: str = option(help="policy path (e.g. the real LLM: python scripts/real_llm.py qwen)")
    oracle_table: str = option(help="oracle table (.jsonl) with V_oracle per prompt")
    T: int = option(2, minimum=1, help="prompts")
    M: int = option(2, minimum=2, help="groups per prompt")
    K_list: list[int] = option([4, 8], minimum=2, help="group sizes")
    dtypes: list[str] = option(["bf16", "fp32"], help="model dtypes to run (bf16, fp16, fp32)")
    repeats: int = option(1, minimum=1, help="runs of each case")
    threads: int = option(2, minimum=1, help="torch threads of each run")
    out: str | None = option(None, help="write the report as JSON here")


def plan_and_peak(stderr: str) -> tuple[float, float, float]:
    """(printed N, the most W, the measured peak) in GB from a run's two memory lines; W is N when not printed."""
    plan, peak = PLAN.search(stderr), PEAK.search(stderr)
    most = MOST.search(plan.group(0))
    return float(plan.group(1)), float(most.group(1)) if most else float(plan.group(1)), float(peak.group(1))


def one_run(args, dtype: str, advisor: bool, save_json: str) -> dict:
    """One run_tracecov.py subprocess: its printed plan and peak (GB) and its seconds."""
    argv = [sys.executable, os.path.join(ROOT, "Gradient_evaluation", "run_tracecov.py")]
    argv += tracecov_argv(args, save_json, dtype) + ([] if advisor else ["--no_advisor"])
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    env = {**os.environ, **thread_env(args.threads)}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"run_tracecov.py failed ({dtype}, advisor {advisor}): {last}")
    printed, most, measured = plan_and_peak(result.stderr)
    return {
        "printed_gb": printed,
        "most_gb": most,
        "peak_gb": measured,
        "printed_over_peak": printed / measured,
        "wall_s": wall,
        "user_s": after.ru_utime - before.ru_utime,
        "system_s": after.ru_stime - before.ru_stime,
    }


def main(argv=None) -> None:
    args = MemoryPlanPeakConfig.from_argv(argv, description=__doc__)
    cases = []
    with tempfile.TemporaryDirectory() as work:
        for dtype in args.dtypes:
            for advisor in (True, False):
                runs = [one_run(args, dtype, advisor, work) for _ in range(args.repeats)]
                cases.append({"dtype": dtype, "advisor": advisor, "runs": runs})
                ratios = ", ".join(f"{r['printed_gb']:.3g}/{r['peak_gb']:.3g} GB" for r in runs)
                print(f"{dtype} advisor {'on ' if advisor else 'off'}: printed/peak {ratios}", flush=True)
    settings = {k: getattr(args, k) for k in ("model", "oracle_table", "T", "M", "K_list", "threads")}
    report = {"command": "run_tracecov.py --device cpu, as a subprocess", "settings": settings, "cases": cases}
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    cli.run(main)
