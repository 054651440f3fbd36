"""Where a trace-of-covariance run's time goes, through the real command line, for this tree and an earlier commit.

Each tree runs Gradient_evaluation/run_tracecov.py's ``main`` in a subprocess on --threads threads (default one),
with timers around the run's parts (only the outermost timed call counts, so nothing is counted twice):
- sampling: PromptSampler.draw and draw_all (the continuations);
- forward: the sequence log-probabilities with gradients (PromptSampler.logprob_fn's function);
- backward: the VJPs (the fast engine's gradient and row_vjps; gradients/engine.py's in trees before the registry);
- statistics: the running sums and their Gram scalars (the fast engine's add_pass, engine.bias_squared), the advisor's
  c1 (advisor_hook.c1_vectors, BetweenPromptBatch.add and .result: the mean gradients and their float64 Gram matrix);
- other: the rest of the run's wall time (imports, model load, rewards, outputs);
- and the subprocess's user and system CPU seconds (the system share: page faults, allocations).
The trees run alternately, --repeats times each; the fastest run of each is reported with its parts' shares.

  python scripts/tracecov_parts.py --model "$(python scripts/real_llm.py)" --oracle_table TABLE \\
      --T 2 --M 2 --K_list 2 4 --base eb19bf9~1 --out results/benchmarks/cpu_tracecov_parts.json
"""

import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PARTS = ("sampling", "forward", "backward", "statistics")
INNER = "TRACECOV_PARTS_INNER"  # {"out", "argv"}: the subprocess times one run_tracecov main(argv)


@dataclass(kw_only=True)
class TracecovPartsConfig(Flags):
    """The policy and table, the run's sizes, the trees, the repeats and the output."""

    model: str = option(help="policy path (e.g. the real LLM: python scripts/real_llm.py)")
    oracle_table: str = option(help="oracle table (.jsonl) with V_oracle per prompt")
    T: int = option(2, minimum=1, help="prompts")
    M: int = option(2, minimum=2, help="groups per prompt")
    K_list: list[int] = option([2, 4], minimum=2, help="group sizes")
    dtype: str = option("fp32", choices=("fp32", "bf16", "fp16"), help="model dtype")
    base: str | None = option(None, help="also time this earlier commit (git archive of it)")
    repeats: int = option(1, minimum=1, help="runs of each tree")
    threads: int = option(1, minimum=1, help="torch threads of each run")
    out: str | None = option(None, help="write the report as JSON here")


def timed_run(argv: list[str], out: str) -> None:
    """Run run_tracecov.py's main with ``argv`` under the part timers; write {part: seconds, "wall": s}."""
    import grpo_mse.gradients.engine as engine
    import grpo_mse.gradients.statistics as statistics
    import grpo_mse.runs.tracecov as tracecov

    seconds = dict.fromkeys((*PARTS, "wall"), 0.0)
    active = []

    def timer(part, function):
        def wrapped(*args, **kwargs):
            if active:
                return function(*args, **kwargs)
            active.append(part)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[part] += time.perf_counter() - start
                active.pop()

        return wrapped

    sampler = tracecov.PromptSampler
    sampler.draw = timer("sampling", sampler.draw)
    if hasattr(sampler, "draw_all"):  # a c1 batch's prompts sampled together (trees after 63865bd)
        sampler.draw_all = timer("sampling", sampler.draw_all)
    logprob_fn = sampler.logprob_fn
    sampler.logprob_fn = lambda self, ids: timer("forward", logprob_fn(self, ids))
    # the fast engine's file since the engine registry (gradients/trace_engines/); gradients/engine.py before it
    fast = importlib.import_module("grpo_mse.gradients.trace_engines.fast") if hasattr(engine, "PromptWork") else engine
    grad = "gradient" if hasattr(fast, "gradient") else "_grad"
    setattr(fast, grad, timer("backward", getattr(fast, grad)))
    fast.row_vjps = timer("backward", fast.row_vjps)
    fast.add_pass = timer("statistics", fast.add_pass)
    engine.bias_squared = timer("statistics", engine.bias_squared)
    # c1_vectors moved to the advisor's hook (runs/advisor_hook.py); earlier trees have it in runs/tracecov.py
    holder = tracecov if hasattr(tracecov, "c1_vectors") else importlib.import_module("grpo_mse.runs.advisor_hook")
    holder.c1_vectors = timer("statistics", holder.c1_vectors)
    batch = statistics.BetweenPromptBatch
    batch.add, batch.result = timer("statistics", batch.add), timer("statistics", batch.result)
    start = time.perf_counter()
    script = cli_script(os.environ["PYTHONPATH"])
    script.main(argv)
    seconds["wall"] = time.perf_counter() - start
    with open(out, "w") as f:
        json.dump(seconds, f)


def cli_script(tree: str):
    import importlib.util

    path = os.path.join(tree, "Gradient_evaluation", "run_tracecov.py")
    spec = importlib.util.spec_from_file_location("run_tracecov", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_tree(tree: str, args, work: str) -> dict:
    # Imported here, in the outer process only: the timed subprocess puts an earlier tree (--base) first on its path,
    # whose studies/ may not have this module.
    from studies.benchmarks.tracecov_flags import thread_env, tracecov_argv

    out = os.path.join(work, "parts.json")
    save = tempfile.mkdtemp(dir=work)
    command = [sys.executable, os.path.abspath(__file__)]
    inner = json.dumps({"out": out, "argv": tracecov_argv(args, save)})
    env = {**os.environ, **thread_env(args.threads), "PYTHONPATH": tree, INNER: inner}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out) as f:
        seconds = json.load(f)
    seconds["other"] = seconds["wall"] - sum(seconds[p] for p in PARTS)
    seconds["shares"] = {p: seconds[p] / seconds["wall"] for p in (*PARTS, "other")}
    seconds["user_s"], seconds["system_s"] = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    seconds["system_share"] = seconds["system_s"] / max(seconds["user_s"] + seconds["system_s"], 1e-9)
    run = sorted(p for p in os.listdir(save) if p.endswith(".json") and not p.endswith("_detailed.json"))[0]
    with open(os.path.join(save, run)) as f:
        seconds["traces"] = json.load(f)["conditional_on_x"]  # per estimator, per K: mean trace over prompts
    return seconds


def main(argv=None) -> None:
    if INNER in os.environ:  # a timed run inside one tree (run_tree's subprocess)
        inner = json.loads(os.environ.pop(INNER))
        timed_run(inner["argv"], inner["out"])
        return
    args = TracecovPartsConfig.from_argv(argv, description=__doc__)
    with tempfile.TemporaryDirectory() as work:
        trees = {"this": ROOT}
        if args.base:
            trees["base"] = os.path.join(work, "base")
            os.makedirs(trees["base"])
            archive = subprocess.run(["git", "-C", ROOT, "archive", args.base], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", trees["base"]], input=archive.stdout, check=True)
        runs = {name: [] for name in trees}
        for repeat in range(args.repeats):
            for name, tree in trees.items():
                folder = os.path.join(work, f"{name}{repeat}")
                os.makedirs(folder)
                runs[name].append(run_tree(tree, args, folder))
                parts = ", ".join(f"{p} {runs[name][-1][p]:.1f} s" for p in (*PARTS, "other"))
                print(f"{name} run {repeat}: {runs[name][-1]['wall']:.1f} s wall ({parts})")
    report = {
        "command": f"run_tracecov.py --device cpu ({args.threads} threads), main() in-process with part timers",
        "settings": {
            k: getattr(args, k) for k in ("model", "oracle_table", "T", "M", "K_list", "dtype", "base", "threads")
        },
        "runs": {name: min(rs, key=lambda r: r["wall"]) for name, rs in runs.items()},
    }
    if "base" in runs:
        this, base = report["runs"]["this"], report["runs"]["base"]
        report["ratios_base_over_this"] = {p: base[p] / this[p] for p in (*PARTS, "wall") if this[p] > 0}
    print(json.dumps(report, indent=1))
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    cli.run(main)
