"""The oracle command line of this tree against the same command line of an earlier commit, in one run.

The earlier commit (--base, default the golden-test commit before the sampler's speed-up) is exported with
``git archive`` to a temporary folder; both trees run calculate_oracle_v.py as subprocesses on one thread,
alternately, --repeats times each. Reported: each tree's minimum wall time and printed seconds per example,
their ratio, whether the output rows (V_oracle, correct_count) agree, and whether the sampled token ids of
the first --limit prompts (HFSampler.sample, the same seeds and settings as the command line) are identical.

  python scripts/bench_oracle_trees.py --model "$(python scripts/real_llm.py)" --n_oracle 8 --limit 2 \\
      --out results/benchmarks/cpu_oracle_sampling.json
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
# Run inside a tree: the sampled token ids of the command line's requests, as JSON on stdout.
TOKENS_SNIPPET = """
import json, sys
from grpo_mse.policy.loading import load_policy
from grpo_mse.policy.sampling import HFSampler, SamplingSettings, eos_token_ids
from grpo_mse.tables.inputs import load_rows, prompt_ids
model_path, dataset, n, limit, batch, seed, temperature, top_p, new = sys.argv[1:]
model, tokenizer = load_policy(model_path, "cpu", "fp32")
settings = SamplingSettings(tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, float(temperature),
                            float(top_p), int(new))
rows = load_rows(dataset)[: int(limit)]
requests = [(prompt_ids(tokenizer, r["prompt"]), int(n), (int(seed), i)) for i, r in enumerate(rows)]
print(json.dumps(HFSampler(model, settings, int(batch)).sample(requests)))
"""


@dataclass(kw_only=True)
class BenchOracleTreesConfig(Flags):
    """The two trees, the oracle command line's settings, the repeats and the output."""

    model: str = option(help="policy path (e.g. the real LLM: python scripts/real_llm.py)")
    base: str = option("82357a0", help="the earlier commit to compare with")
    dataset: str = option(os.path.join(ROOT, "data", "arithmetic_zero_shot.jsonl"), help="oracle dataset")
    n_oracle: int = option(8, minimum=1, help="samples per prompt")
    limit: int = option(2, minimum=1, help="prompts")
    batch_size: int = option(32, minimum=1, help="the oracle's --batch_size")
    temperature: float = option(1.0, above=0, help="sampling temperature")
    top_p: float = option(0.95, above=0, help="nucleus mass")
    max_new_tokens: int = option(32, minimum=1, help="tokens per continuation")
    repeats: int = option(2, minimum=1, help="runs of each tree")
    out: str | None = option(None, help="write the report as JSON here")


def oracle_run(tree: str, args, out_dir: str) -> tuple[float, float, list]:
    command = [
        sys.executable,
        os.path.join(tree, "Gradient_evaluation", "calculate_oracle_v.py"),
        *("--model", args.model, "--dataset", args.dataset, "--device", "cpu", "--dtype", "fp32"),
        *("--n_oracle", str(args.n_oracle), "--limit", str(args.limit), "--batch_size", str(args.batch_size)),
        *("--temperature", str(args.temperature), "--top_p", str(args.top_p)),
        *("--max_new_tokens", str(args.max_new_tokens), "--out_dir", out_dir),
    ]
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": tree}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    per_example = float(re.search(r"\(([0-9.]+) s per example\)", done.stdout + done.stderr).group(1))
    (path,) = glob.glob(os.path.join(out_dir, "*.jsonl"))
    with open(path) as f:
        rows = [(r["V_oracle"], r["correct_count"]) for r in map(json.loads, f)]
    return wall, per_example, rows


def sampled_tokens(tree: str, args) -> list:
    settings = (args.n_oracle, args.limit, args.batch_size, 0, args.temperature, args.top_p, args.max_new_tokens)
    command = [sys.executable, "-c", TOKENS_SNIPPET, args.model, args.dataset, *map(str, settings)]
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": tree}
    return json.loads(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout)


def main(argv=None) -> None:
    args = BenchOracleTreesConfig.from_argv(argv, description=__doc__)
    with tempfile.TemporaryDirectory() as work:
        base_tree = os.path.join(work, "base")
        os.makedirs(base_tree)
        archive = subprocess.run(["git", "-C", ROOT, "archive", args.base], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", base_tree], input=archive, check=True)
        trees = {"base": base_tree, "this": ROOT}
        runs = {name: [] for name in trees}
        for repeat in range(args.repeats):
            for name, tree in trees.items():
                runs[name].append(oracle_run(tree, args, os.path.join(work, f"{name}{repeat}")))
                print(f"{name} run {repeat}: {runs[name][-1][0]:.1f} s wall, {runs[name][-1][1]:.2f} s/example")
        tokens = {name: sampled_tokens(tree, args) for name, tree in trees.items()}
    report = {
        "command": "calculate_oracle_v.py --device cpu --dtype fp32 (one thread)",
        "settings": {k: getattr(args, k) for k in ("model", "base", "n_oracle", "limit", "batch_size")}
        | {k: getattr(args, k) for k in ("temperature", "top_p", "max_new_tokens", "repeats")},
        "wall_seconds": {name: min(r[0] for r in rs) for name, rs in runs.items()},
        "seconds_per_example": {name: min(r[1] for r in rs) for name, rs in runs.items()},
        "rows_agree": all(r[2] == runs["base"][0][2] for rs in runs.values() for r in rs),
        "tokens_identical": tokens["base"] == tokens["this"],
        "sequences_compared": sum(map(len, tokens["this"])),
    }
    report["speedup_per_example"] = report["seconds_per_example"]["base"] / report["seconds_per_example"]["this"]
    report["speedup_wall"] = report["wall_seconds"]["base"] / report["wall_seconds"]["this"]
    print(json.dumps(report, indent=1))
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    cli.run(main)
