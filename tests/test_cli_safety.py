"""Every mistake of issue 13 through the real command line: exit 2, one line without a traceback, nothing written.

Each case runs as its own process (tests/cli_runner.py forks one per command line after importing the heavy
libraries once; shell demos run directly). Its folder, and the repository's data/, results/ and assets/, are
compared byte for byte before and after.
"""

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from conftest import BUILTIN_POLICY, ROOT, tracecov_argv

from grpo_mse.gradients.estimators import UNBIASED
from grpo_mse.tables.resume import model_fingerprint

ROW = {"id": 0, "prompt": "Solve the arithmetic problem.\n2 + 3 =", "ground_truth": 5, "V_oracle": 0.5}
TABLE = "{tmp}/t.jsonl"
STAMP = "20260101_000000"


@dataclass
class Case:
    name: str
    argv: list  # script (relative to the repository) and arguments; {tmp} is the case's folder
    needle: str  # part of the one error line
    setup: tuple = ()  # (relative path, text) files written first
    env: dict = field(default_factory=dict)
    cwd: str = "{tmp}"
    code: int = 2


def rows_text(*changes: dict) -> str:
    """Two good rows, the first changed by each of ``changes``."""
    rows = [ROW, {**ROW, "id": 1}]
    for change in changes:
        rows[0] = {**rows[0], **change}
    return "".join(json.dumps(r) + "\n" for r in rows)


def table(*changes, name="t.jsonl"):
    return (name, rows_text(*changes))


def tracecov(*flags, table_path=TABLE, out="{tmp}/out", plot=("--skip_plot",)):
    argv = tracecov_argv(table_path, out, *plot, skip_plot=False, T=2, M=2, K_list=2)
    return ["Gradient_evaluation/run_tracecov.py", *argv, *flags]


def oracle(*flags, dataset=TABLE, out="{tmp}/o"):
    return [
        "Gradient_evaluation/calculate_oracle_v.py",
        "--model",
        BUILTIN_POLICY,
        "--dataset",
        dataset,
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--n_oracle",
        "4",
        "--out_dir",
        out,
        *flags,
    ]


def oracle_settings(**changes) -> str:
    """The settings file calculate_oracle_v.py writes for oracle(--n_oracle 4) on table()."""
    settings = {
        "model": BUILTIN_POLICY,
        "revision": "main",
        "dataset": "sha256:" + hashlib.sha256(rows_text().encode()).hexdigest(),
        "split": "train",
        "n_oracle": 4,
        "seed": 0,
        "temperature": 1.0,
        "top_p": 0.95,
        "max_new_tokens": 32,
        "dtype": "fp32",
        "backend": "hf",
        "model_fingerprint": model_fingerprint(BUILTIN_POLICY),
    }
    return json.dumps({**settings, **changes})


def tracecov_header(**changes) -> str:
    """The progress-log header of an unfinished run_tracecov run with tracecov()'s settings."""
    config = {
        "model": BUILTIN_POLICY,
        "revision": "main",
        "dtype": "fp32",
        "seed": 0,
        "T": 2,
        "M": 2,
        "K_list": [2],
        "temperature": 1.0,
        "top_p": 0.95,
        "max_new_tokens": 32,
        "subsample_prompts": None,
        "drop_eos": False,
        "estimators": list(UNBIASED),
        "shared_samples": False,
        "c1_batch": 16,
        "no_advisor": False,
        "backend": "hf",
        "model_fingerprint": model_fingerprint(BUILTIN_POLICY),
        "oracle_table_fingerprint": "sha256:" + hashlib.sha256(rows_text().encode()).hexdigest(),
    }
    return json.dumps({"config": {**config, **changes}}) + "\n"


ORACLE_FILE = f"o/oracle_v_n4_tiny_policy_{STAMP}.jsonl"
PROGRESS = f"out/tracecov_tiny_policy_{STAMP}.progress.rank0.jsonl"
RUN_JSON = json.dumps(
    {"K_list": [2, 4], "conditional_on_x": {"grpo": [1.0, 0.5]}, "ci95": {"grpo": [0.1, 0.1]}, "config": {"model": "m"}}
)
TRAINING = "K,seed,step,metric,value\n4,0,1,val-core/x/acc/mean@1,0.5\n"
GSM = ("g.jsonl", json.dumps({"question": "1+1?", "answer": "2 #### 2"}) + "\n")
PREPARE = [
    "Policy_Optimization/prepare_data.py",
    "--source",
    "gsm8k",
    "--train_file",
    "{tmp}/g.jsonl",
    "--test_file",
    "{tmp}/g.jsonl",
    "--out_dir",
    "{tmp}/parquet",
]
WANDB_ROW = json.dumps({"_step": 1, "val-core/x/acc/mean@1": 0.5}) + "\n"


def wandb_run(folder: str, value: float) -> tuple:
    """A wandb-history run folder of a K=8 run (its config records K; the folder name is a label only)."""
    return (
        (f"runs/{folder}/files/wandb-history.jsonl", json.dumps({"_step": 1, "val-core/x/acc/mean@1": value}) + "\n"),
        (f"runs/{folder}/files/config.yaml", "actor_rollout_ref:\n  value:\n    rollout:\n      n: 8\n"),
    )


CASES = [
    # never destroy: demos, generators, diagnostics
    Case("demo --help", ["scripts/demo.sh", "--help"], "", code=0, cwd="{repo}"),
    Case("demo bad argument", ["scripts/demo.sh", "--fast"], "takes no arguments", cwd="{repo}"),
    Case(
        "demo folder not its own",
        ["scripts/demo.sh"],
        "was not made by a demo",
        setup=(("keep/mine.txt", "x"),),
        env={"DEMO_OUT": "{tmp}/keep", "OUT": "{tmp}", "MODEL": "Qwen/Qwen2.5-1.5B-Instruct"},
    ),
    Case("demo DEMO_T=0", ["scripts/demo.sh"], "DEMO_T must be an integer >= 1", env={"DEMO_T": "0"}),
    Case("demo DEMO_K_LIST=1", ["scripts/demo.sh"], "DEMO_K_LIST must be an integer >= 2", env={"DEMO_K_LIST": "1 4"}),
    Case("theory demo --help", ["scripts/theory_demo.sh", "-h"], "", code=0),
    Case(
        "theory demo folder not its own",
        ["scripts/theory_demo.sh"],
        "was not made by a demo",
        setup=(("keep/mine.txt", "x"),),
        env={"THEORY_OUT": "{tmp}/keep", "OUT": "{tmp}"},
    ),
    Case(
        "make data --n 0", ["scripts/make_arithmetic_data.py", "--n", "0"], "argument --n: must be >= 1", cwd="{repo}"
    ),
    Case(
        "make data over tracked files",
        ["scripts/make_arithmetic_data.py", "--n", "5"],
        "pass --overwrite",
        cwd="{repo}",
    ),
    Case(
        "make data --out_dir is a file",
        ["scripts/make_arithmetic_data.py", "--out_dir", "{tmp}/f"],
        "is a file, not a folder",
        setup=(("f", "x"),),
    ),
    Case(
        "explain_baseline without --out",
        ["scripts/explain_baseline.py", "--oracle_table", TABLE],
        "required: --out",
        setup=(table(),),
        cwd="{repo}",
    ),
    Case(
        "explain_baseline --out folder",
        ["scripts/explain_baseline.py", "--oracle_table", TABLE, "--out", "{tmp}"],
        "is a folder, not a file",
        setup=(table(),),
    ),
    Case(
        "explain_baseline --n 0",
        ["scripts/explain_baseline.py", "--oracle_table", TABLE, "--out", "{tmp}/x.json", "--n", "0"],
        "argument --n: must be >= 1",
        setup=(table(),),
    ),
    # never mix: resume keys, corrupt lines
    Case(
        "tracecov resume after the table changed",
        tracecov("--resume"),
        "oracle_table_fingerprint (saved",
        setup=(table(), (PROGRESS, tracecov_header(oracle_table_fingerprint="sha256:old"))),
    ),
    Case(
        "tracecov resume with another revision",
        tracecov("--resume", "--revision", "v2"),
        "revision (saved 'main', now 'v2')",
        setup=(table(), (PROGRESS, tracecov_header())),
    ),
    Case(
        "oracle resume with another seed",
        oracle("--resume", "--seed", "1"),
        "seed (saved 0, now 1)",
        setup=(table(), (ORACLE_FILE, ""), (ORACLE_FILE.replace(".jsonl", ".settings.json"), oracle_settings())),
    ),
    Case(
        "oracle resume with another model",
        oracle("--resume"),
        "model (saved 'org1/x'",
        setup=(
            table(),
            (ORACLE_FILE, ""),
            (
                ORACLE_FILE.replace(".jsonl", ".settings.json"),
                oracle_settings(model="org1/x", model_fingerprint="sha256:" + "0" * 64),
            ),
        ),
    ),
    Case(
        "oracle resume of a file without settings",
        oracle("--resume"),
        "records no settings",
        setup=(table(), (ORACLE_FILE, "")),
    ),
    Case(
        "oracle resume with a corrupt line",
        oracle("--resume"),
        "line 2 is corrupt",
        setup=(
            table(),
            (ORACLE_FILE, json.dumps({**ROW, "V_oracle": 0.5}) + "\n{oops\n"),
            (ORACLE_FILE.replace(".jsonl", ".settings.json"), oracle_settings()),
        ),
    ),
    # never a silent wrong number
    Case(
        "ground truth abc",
        tracecov(),
        "ground_truth 'abc', which the arithmetic reward rule",
        setup=(table({"ground_truth": "abc"}),),
    ),
    Case(
        "ground truth #### 72",
        oracle(),
        "ground_truth '#### 72', which the arithmetic",
        setup=(table({"ground_truth": "#### 72"}),),
    ),
    Case(
        "GSM8K ground truth abc",
        tracecov(),
        "the gsm8k reward rule (data_source 'openai/gsm8k') can never match",
        setup=(table({"ground_truth": "abc", "data_source": "openai/gsm8k"}),),
    ),
    Case(
        "MATH ground truth empty",
        oracle(),
        "the math reward rule",
        setup=(table({"ground_truth": "", "data_source": "math"}),),
    ),
    Case("V_oracle 100", tracecov(), "V_oracle 100; it must be a probability", setup=(table({"V_oracle": 100}),)),
    Case("V_oracle -1", tracecov(), "V_oracle -1", setup=(table({"V_oracle": -1}),)),
    Case("V_oracle NaN", tracecov(), "V_oracle nan", setup=(table({"V_oracle": float("nan")}),)),
    # n_oracle read as text or a fraction would silently drop the oracle-noise correction
    Case(
        "n_oracle '256'", tracecov(), "n_oracle '256'; it must be a whole number", setup=(table({"n_oracle": "256"}),)
    ),
    Case(
        "n_oracle 256.5", tracecov(), "n_oracle 256.5; it must be a whole number", setup=(table({"n_oracle": 256.5}),)
    ),
    Case("n_oracle 0", tracecov(), "n_oracle 0; it must be a whole number >= 1", setup=(table({"n_oracle": 0}),)),
    Case("empty prompt", tracecov(), "row 0 has an empty prompt", setup=(table({"prompt": ""}),)),
    Case(
        "empty oracle prompt",
        oracle(),
        "row 0 has an empty prompt",
        setup=(table({"prompt": [{"role": "user", "content": " "}]}),),
    ),
    Case("prompt longer than the model", tracecov("--max_new_tokens", "100000"), "> the model's", setup=(table(),)),
    Case(
        "tracecov --max_new_tokens 0",
        tracecov("--max_new_tokens", "0"),
        "--max_new_tokens must be >= 1",
        setup=(table(),),
    ),
    Case(
        "oracle --max_new_tokens 0", oracle("--max_new_tokens", "0"), "--max_new_tokens must be >= 1", setup=(table(),)
    ),
    Case("oracle --limit 0", oracle("--limit", "0"), "--limit must be >= 1", setup=(table(),)),
    Case("oracle --limit -1", oracle("--limit", "-1"), "--limit must be >= 1", setup=(table(),)),
    Case("oracle --sample 0", oracle("--sample", "0"), "--sample must be >= 1", setup=(table(),)),
    Case("oracle --sample --limit", oracle("--sample", "2", "--limit", "3"), "use one", setup=(table(),)),
    Case(
        "tracecov --advisor_estimator grpo_std untraced",
        tracecov("--advisor_estimator", "grpo_std"),
        "add grpo_std to --estimators",
        setup=(table(),),
    ),
    # one line instead of a traceback
    Case("--gen_bs 0", tracecov("--gen_bs", "0"), "--gen_bs must be >= 1", setup=(table(),)),
    Case("--c1_batch 0", tracecov("--c1_batch", "0"), "--c1_batch must be >= 1", setup=(table(),)),
    Case("--c1_batch -2", tracecov("--c1_batch", "-2"), "--c1_batch must be >= 1", setup=(table(),)),
    Case(
        "--subsample_prompts -1",
        tracecov("--subsample_prompts", "-1"),
        "--subsample_prompts must be >= 1",
        setup=(table(),),
    ),
    Case("--save_json is a file", tracecov(out="{tmp}/f"), "is a file, not a folder", setup=(table(), ("f", "x"))),
    Case(
        "--plot_path is a file",
        tracecov(plot=("--plot_path", "{tmp}/f")),
        "is a file, not a folder",
        setup=(table(), ("f", "x")),
    ),
    Case("no --plot_path", tracecov(plot=()), "--plot_path is required unless --skip_plot", setup=(table(),)),
    Case(
        "oracle --out_dir under a file", oracle(out="{tmp}/f/o"), "is a file, not a folder", setup=(table(), ("f", "x"))
    ),
    Case("--device tpu", tracecov("--device", "tpu"), "unknown device 'tpu'", setup=(table(),)),
    Case(
        "a .csv table",
        tracecov(table_path="{tmp}/t.csv"),
        "unsupported table format .csv",
        setup=(("t.csv", "prompt,ground_truth,V_oracle\nx,1,0.5\n"),),
    ),
    Case(
        "missing local model ./",
        tracecov("--model", "./no_such_model"),
        "model folder not found: ./no_such_model",
        setup=(table(),),
    ),
    Case(
        "missing local model a/b/c", oracle("--model", "models/qwen/0.5b"), "model folder not found", setup=(table(),)
    ),
    Case(
        "vllm under torchrun",
        tracecov("--backend", "vllm", "--device", "cuda"),
        "cannot be sharded with torchrun",
        setup=(table(),),
        env={"WORLD_SIZE": "2", "RANK": "0"},
    ),
    # issue 17: the user's next paths (each of these was a traceback or a silent wrong result)
    Case(
        "WORLD_SIZE without RANK",
        tracecov(),
        "start the command with torchrun",
        setup=(table(),),
        env={"WORLD_SIZE": "2"},
    ),
    Case("tracecov --budget 3", tracecov("--budget", "3"), "--budget 3 is odd", setup=(table(),)),
    Case("tracecov --seed -1", tracecov("--seed", "-1"), "--seed must be >= 0", setup=(table(),)),
    Case("oracle --seed -5", oracle("--seed", "-5"), "--seed must be >= 0", setup=(table(),)),
    Case(
        "--temperature 1e-300", tracecov("--temperature", "1e-300"), "--temperature must be >= 0.01", setup=(table(),)
    ),
    Case("--device mps without MPS", tracecov("--device", "mps"), "no MPS", setup=(table(),)),
    Case(
        "Latin-1 table",
        oracle(dataset="{tmp}/l.jsonl"),
        "l.jsonl: not UTF-8 text",
        setup=(("l.jsonl", '{"id": 0, "prompt": "café 2 + 3 =", "ground_truth": 5}\n'.encode("latin-1")),),
    ),
    Case("json of integers", oracle(dataset="{tmp}/i.json"), "i.json: row 0 is int 1", setup=(("i.json", "[1,2,3]"),)),
    Case(
        "message without role",
        tracecov(),
        "row 0: message 0 of the prompt has no 'role' field",
        setup=(table({"prompt": [{"content": "2 + 3 ="}]}),),
    ),
    Case(
        "integer prompt",
        tracecov(),
        "t.jsonl: row 1: the prompt is int 7",
        setup=(("t.jsonl", rows_text() + json.dumps({**ROW, "id": 2, "prompt": 7}) + "\n"),),
    ),
    Case(
        "corrupt parquet",
        oracle(dataset="{tmp}/b.parquet"),
        "b.parquet: not a readable parquet file",
        setup=(("b.parquet", "PAR1 garbage"),),
    ),
    Case("--save_json empty", tracecov(out=""), "--save_json is empty", setup=(table(),)),
    Case("--split on a file", oracle("--split", "test"), "--split test selects a split", setup=(table(),)),
    Case("--c1_batch 1", tracecov("--c1_batch", "1"), "--c1_batch 1 leaves no pair", setup=(table(),)),
    Case(
        "build_tiny_policy over the shipped model",
        ["scripts/build_tiny_policy.py", "--steps", "1"],
        "would replace files tracked by git",
        cwd="{repo}",
    ),
    Case(
        "simulate_algorithm1 over committed results",
        ["scripts/simulate_algorithm1.py", "--steps", "1"],
        "would replace files tracked by git",
        cwd="{repo}",
    ),
    Case(
        "bench_cli over the committed benchmark",
        ["benchmarks/bench_cli.py", "--repeats", "1"],
        "would replace files tracked by git",
    ),
    Case(
        "make_figures --paper header only",
        ["plots/make_figures.py", "--paper", "{tmp}/p.csv", "--out_dir", "{tmp}"],
        "no data lines",
        setup=(("p.csv", "model,K,estimator,mse,ci_halfwidth\n"),),
    ),
    Case(
        "make_figures --advisor --budget 7",
        ["plots/make_figures.py", "--advisor", "{tmp}/r.json", "--budget", "7", "--out_dir", "{tmp}"],
        "--budget 7 is odd",
        setup=(("r.json", RUN_JSON),),
    ),
    Case("vllm on cpu", oracle("--backend", "vllm"), "--backend vllm needs --device cuda", setup=(table(),)),
    Case("bad flag type", tracecov("--M", "two"), "argument --M: invalid int value", setup=(table(),)),
    Case(
        "make_figures cut JSON",
        ["plots/make_figures.py", "--tracecov", "{tmp}/r.json", "--out_dir", "{tmp}"],
        "not valid JSON",
        setup=(("r.json", RUN_JSON[:40]),),
    ),
    Case(
        "make_figures foreign JSON",
        ["plots/make_figures.py", "--tracecov", "{tmp}/r.json", "--out_dir", "{tmp}"],
        "(no K_list, conditional_on_x)",
        setup=(("r.json", "[1, 2]"),),
    ),
    Case(
        "make_figures partial JSON",
        ["plots/make_figures.py", "--tracecov", "{tmp}/r.json", "--out_dir", "{tmp}"],
        "is incomplete",
        setup=(("r.json", RUN_JSON.replace("[1.0, 0.5]", "[1.0]")),),
    ),
    Case(
        "make_figures bad advisor after a good run",
        ["plots/make_figures.py", "--tracecov", "{tmp}/r.json", "--advisor", "{tmp}/r.json", "--out_dir", "{tmp}"],
        "no group_size_advisor",
        setup=(("r.json", RUN_JSON),),
    ),
    Case(
        "make_figures --budget 0",
        ["plots/make_figures.py", "--advisor", "{tmp}/r.json", "--budget", "0"],
        "argument --budget: must be >= 2",
        setup=(("r.json", RUN_JSON),),
    ),
    Case(
        "make_figures empty training CSV",
        ["plots/make_figures.py", "--training_csv", "{tmp}/t.csv", "--out_dir", "{tmp}"],
        "not a readable CSV",
        setup=(("t.csv", ""),),
    ),
    Case(
        "make_figures --metric nope",
        ["plots/make_figures.py", "--training_csv", "{tmp}/t.csv", "--metric", "nope", "--out_dir", "{tmp}"],
        "metric 'nope' not in the table",
        setup=(("t.csv", TRAINING),),
    ),
    Case(
        "figures.training header only",
        ["grpo_mse/figures/training.py", "--csv", "{tmp}/t.csv", "--out_dir", "{tmp}"],
        "no rows",
        setup=(("t.csv", TRAINING.splitlines()[0] + "\n"),),
    ),
    Case(
        "estimator_table cut theory",
        ["scripts/estimator_table.py", "--theory", "{tmp}/r.json", "--tracecov", "{tmp}/r.json", "--out_dir", "{tmp}"],
        "not valid JSON",
        setup=(("r.json", "{"),),
    ),
    Case(
        "exact_theory --temperature 0",
        ["scripts/exact_theory.py", "--dataset", TABLE, "--temperature", "0", "--out_dir", "{tmp}"],
        "argument --temperature: must be > 0",
        setup=(table(),),
    ),
    Case(
        "collect_runs missing path",
        ["Policy_Optimization/collect_runs.py", "{tmp}/nope", "--out", "{tmp}/r.csv"],
        "not found: ",
        setup=(),
    ),
    Case(
        "collect_runs no runs",
        ["Policy_Optimization/collect_runs.py", "{tmp}/empty", "--out", "{tmp}/r.csv"],
        "no training metrics found",
        setup=(("empty/readme.md", "x"),),
    ),
    Case(
        "collect_runs two runs one name",
        ["Policy_Optimization/collect_runs.py", "{tmp}/runs", "--out", "{tmp}/r.csv"],
        "both record K=8 seed=default but differ",
        setup=(*wandb_run("a", 0.5), *wandb_run("b", 0.7)),
    ),
    Case(
        "collect_runs --out folder",
        ["Policy_Optimization/collect_runs.py", "{tmp}", "--out", "{tmp}"],
        "is a folder, not a file",
    ),
    Case(
        "sweep DRY_RUN=maybe",
        ["Policy_Optimization/sweep_group_size.py", "--K_list", "8"],
        "DRY_RUN='maybe'",
        env={"DRY_RUN": "maybe"},
    ),
    Case(
        "sweep --budget 0",
        ["Policy_Optimization/sweep_group_size.py", "--budget", "0"],
        "argument --budget: must be >= 8",
    ),
    Case(
        "sweep K does not divide",
        ["Policy_Optimization/sweep_group_size.py", "--K_list", "48", "--dry_run"],
        "K=48 must divide 1024",
    ),
    Case("prepare_data missing file", PREPARE[:4] + ["{tmp}/nope.jsonl"] + PREPARE[5:], "file not found", setup=(GSM,)),
    Case(
        "prepare_data missing column",
        PREPARE,
        "no 'question' field",
        setup=(("g.jsonl", json.dumps({"q": "1+1?", "answer": "#### 2"}) + "\n"),),
    ),
    Case(
        "prepare_data GSM8K answer without ####",
        PREPARE,
        "no '#### <number>'",
        setup=(("g.jsonl", json.dumps({"question": "1+1?", "answer": "2"}) + "\n"),),
    ),
    Case(
        "prepare_data MATH without boxed",
        [p.replace("gsm8k", "math") for p in PREPARE],
        "no \\boxed{}",
        setup=(("g.jsonl", json.dumps({"problem": "1+1?", "solution": "2"}) + "\n"),),
    ),
    Case(
        "prepare_data --data_source gsm_hard",
        PREPARE + ["--data_source", "gsm_hard"],
        "scored with the math rule",
        setup=(GSM,),
    ),
    Case(
        "prepare_data --n_train 0",
        ["Policy_Optimization/prepare_data.py", "--out_dir", "{tmp}/p", "--n_train", "0"],
        "argument --n_train: must be >= 1",
    ),
    Case(
        "simulate K does not divide",
        ["scripts/simulate_algorithm1.py", "--budget", "64", "--K_list", "3", "--out_dir", "{tmp}/s"],
        "every K must divide --budget 64",
    ),
    Case("simulate --top_p 2", ["scripts/simulate_algorithm1.py", "--top_p", "2"], "argument --top_p: must be"),
    Case(
        "build_tiny_policy --steps 0",
        ["scripts/build_tiny_policy.py", "--steps", "0", "--out_dir", "{tmp}/m"],
        "argument --steps: must be >= 1",
    ),
    Case("bench --M 1", ["benchmarks/bench_engines.py", "--M", "1"], "argument --M: must be >= 2"),
    Case("bench --device tpu", ["benchmarks/bench_engines.py", "--device", "tpu"], "unknown device 'tpu'"),
]


def snapshot(folder: str) -> dict:
    """{relative path: sha256 of the bytes, or "dir"} of everything under ``folder``."""
    state = {}
    for base, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in dirs:
            state[os.path.relpath(os.path.join(base, name), folder)] = "dir"
        for name in files:
            with open(os.path.join(base, name), "rb") as handle:
                state[os.path.relpath(os.path.join(base, name), folder)] = hashlib.sha256(handle.read()).hexdigest()
    return state


def repo_snapshot() -> dict:
    top = {name: "top" for name in os.listdir(ROOT) if name not in (".git", ".pytest_cache", ".ruff_cache")}
    return {
        **top,
        **{f"{d}/{p}": h for d in ("data", "results", "assets") for p, h in snapshot(os.path.join(ROOT, d)).items()},
    }


def _fill(text: str, tmp: str) -> str:
    return text.replace("{tmp}", tmp).replace("{repo}", ROOT)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Run every case; {name: (result, folder before, folder after)} and the repository before/after."""
    folders, before, python, shell = {}, {}, [], []
    for number, case in enumerate(CASES):
        tmp = str(tmp_path_factory.mktemp(f"case{number}"))
        for relative, text in case.setup:
            path = os.path.join(tmp, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:  # bytes as given (e.g. a Latin-1 table), text as UTF-8
                handle.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        folders[case.name], before[case.name] = tmp, snapshot(tmp)
        argv = [os.path.join(ROOT, case.argv[0])] + [_fill(a, tmp) for a in case.argv[1:]]
        spec = {"argv": argv, "cwd": _fill(case.cwd, tmp), "env": {k: _fill(v, tmp) for k, v in case.env.items()}}
        (shell if argv[0].endswith(".sh") else python).append((case.name, spec))
    repo_before = repo_snapshot()
    results = {}
    for name, spec in shell:
        done = subprocess.run(
            ["bash", *spec["argv"]],
            cwd=spec["cwd"],
            env={**os.environ, **spec["env"]},
            capture_output=True,
            text=True,
            timeout=60,
        )
        results[name] = {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    cases_file = tmp_path_factory.mktemp("runner") / "cases.json"
    cases_file.write_text(json.dumps([spec for _, spec in python]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    runner = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "cli_runner.py"), str(cases_file)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert runner.returncode == 0, runner.stderr[-3000:]
    results.update(zip([name for name, _ in python], json.loads(runner.stdout)))
    return (
        {name: (results[name], before[name], snapshot(folders[name])) for name in folders},
        repo_before,
        repo_snapshot(),
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_in_one_line_with_nothing_written(outcomes, case):
    result, before, after = outcomes[0][case.name]
    assert result["returncode"] == case.code, result["stderr"][-2000:]
    assert "Traceback" not in result["stderr"]
    if case.code == 2:
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0] and case.needle in errors[0], result["stderr"][-2000:]
    assert before == after


@pytest.mark.slow
def test_the_repository_is_untouched(outcomes):
    _, repo_before, repo_after = outcomes
    assert repo_before == repo_after


# Behaviour behind the refusals (no command line needed).

ENTRY_POINTS = [
    "Gradient_evaluation/run_tracecov.py",
    "Gradient_evaluation/calculate_oracle_v.py",
    "plots/make_figures.py",
    "scripts/make_arithmetic_data.py",
    "scripts/explain_baseline.py",
    "scripts/exact_theory.py",
    "scripts/estimator_table.py",
    "scripts/simulate_algorithm1.py",
    "scripts/build_tiny_policy.py",
    "benchmarks/bench_engines.py",
    "Policy_Optimization/prepare_data.py",
    "Policy_Optimization/collect_runs.py",
    "Policy_Optimization/sweep_group_size.py",
]


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_every_flag_has_help_with_its_default(script, monkeypatch):
    from conftest import load_script

    from grpo_mse import cli

    class Parsed(Exception):
        pass

    def capture(self, argv=None, namespace=None):
        raise Parsed(self)

    monkeypatch.setattr(cli.ArgumentParser, "parse_args", capture)
    module = load_script(script)
    with pytest.raises(Parsed) as parsed:
        getattr(module, "parse_args", None) and module.parse_args([]) or module.main([])
    parser = parsed.value.args[0]
    assert parser.formatter_class is cli.HelpFormatter
    undocumented = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert not undocumented


def test_ctrl_c_is_one_line_with_the_resume_hint(capsys):
    from grpo_mse import cli

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as done:
        cli.run(interrupted, resume_hint="rerun the same command with --resume to continue")
    assert done.value.code == 130
    assert capsys.readouterr().err == "error: interrupted; rerun the same command with --resume to continue\n"


def test_json_has_null_not_nan(tmp_path):
    from grpo_mse.tables.outputs import append_jsonl, mean_ci, write_json

    write_json(tmp_path / "a.json", {"single_prompt": mean_ci([2.0]), "inf": [float("inf")]})
    text = (tmp_path / "a.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"single_prompt": {"mean": 2.0, "sd": None, "ci95": None, "n": 1}, "inf": [None]}
    append_jsonl(tmp_path / "b.jsonl", {"x": float("nan")})
    assert (tmp_path / "b.jsonl").read_text() == '{"x": null}\n'


def test_concurrent_runs_get_their_own_names_and_locks(tmp_path):
    from grpo_mse.cli import UsageError
    from grpo_mse.tables.resume import claim, lock

    stem = str(tmp_path / "tracecov_m_20260101_000000")
    first, second = claim(stem, ".progress.rank0.jsonl"), claim(stem, ".progress.rank0.jsonl")
    assert (first, second) == (stem, stem + "_2")
    held = lock(first + ".progress.rank0.jsonl")
    with pytest.raises(UsageError, match="another process is writing"):
        lock(first + ".progress.rank0.jsonl")
    held.close()
    lock(first + ".progress.rank0.jsonl").close()


def test_resume_picks_the_run_with_equal_settings():
    from grpo_mse.cli import UsageError
    from grpo_mse.tables.resume import choose

    runs = [("a", {"seed": 0, "T": 2}), ("b", {"seed": 1, "T": 2})]
    assert choose(runs, {"seed": 0, "T": 2}, ("seed", "T")) == "a"
    assert choose([], {"seed": 0}, ("seed",)) is None
    with pytest.raises(UsageError, match=r"cannot --resume b: settings differ: seed \(saved 1, now 2\)"):
        choose(runs, {"seed": 2, "T": 2}, ("seed", "T"))


def test_torn_last_line_is_cut_and_a_corrupt_line_refused(tmp_path):
    from grpo_mse.tables.inputs import DataError
    from grpo_mse.tables.outputs import read_complete_jsonl

    log = tmp_path / "p.jsonl"
    log.write_text('{"a": 1}\n{"a": 2')
    assert read_complete_jsonl(str(log)) == [{"a": 1}] and log.read_text() == '{"a": 1}\n'
    log.write_text('{"a": 1}\n[]\n{"a": 3}\n')
    with pytest.raises(DataError, match="line 2 is corrupt"):
        read_complete_jsonl(str(log))
    assert log.read_text() == '{"a": 1}\n[]\n{"a": 3}\n'


def test_rows_are_a_seeded_shuffle_then_the_first_t():
    import random

    from grpo_mse.tables.inputs import selection

    order = list(range(10))
    random.Random(3).shuffle(order)
    assert selection(10, 4, seed=3) == order[:4]
    assert selection(10, 10, seed=3) == selection(10, 50, seed=3) == list(range(10))
    assert sorted(selection(10, 4, seed=3, subsample=6)) != selection(10, 4, seed=3, subsample=6)  # shuffled


def test_duplicate_k_and_estimators_are_run_once(capsys):
    from conftest import load_script

    args = load_script("Gradient_evaluation/run_tracecov.py").parse_args(
        [
            "--oracle_table",
            "t.jsonl",
            "--save_json",
            "out",
            "--skip_plot",
            "--device",
            "cpu",
            "--model",
            BUILTIN_POLICY,
            "--K_list",
            "4",
            "2",
            "4",
            "--estimators",
            "grpo",
            "grpo",
            "naive",
        ]
    )
    assert args.K_list == [4, 2] and args.estimators == ["grpo", "naive"]
    assert "note: --K_list lists a value twice; using 4 2" in capsys.readouterr().err


def test_sweep_deduplicates_and_reads_dry_run(monkeypatch):
    from conftest import load_script

    sweep = load_script("Policy_Optimization/sweep_group_size.py")
    monkeypatch.setenv("DRY_RUN", "false")
    args = sweep.parse_args(["--K_list", "4", "4", "--seeds", "0", "0"])
    assert (args.K_list, args.seeds, args.dry_run) == ([4], [0], False)
    monkeypatch.setenv("DRY_RUN", "1")
    assert sweep.parse_args([]).dry_run


def test_collector_skips_a_torn_line_and_merges_one_run_logged_twice(tmp_path):
    from grpo_mse.training.logs import collect

    history = tmp_path / "grpo_K8_seed1" / "files" / "wandb-history.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text(WANDB_ROW + WANDB_ROW.replace('"_step": 1', '"_step": 2')[:-9])
    config = "actor_rollout_ref:\n  value:\n    rollout:\n      n: 8\ndata:\n  value:\n    seed: 1\n"
    (history.parent / "config.yaml").write_text(config)
    settings = "[grpo_train] settings: TRAINER=verl GROUP_SIZE=8 SEED=1 BUDGET=1024 LR=1e-6\n"
    (tmp_path / "grpo_K8_seed1.log").write_text(settings + "step:1 - val-core/x/acc/mean@1:0.5\n")
    with pytest.warns(UserWarning, match="skipping unreadable line 2"):
        frame = collect([str(tmp_path)])
    assert frame[["K", "seed", "step", "value"]].values.tolist() == [[8, 1, 1, 0.5]]


@pytest.mark.slow
def test_the_runner_matches_a_plain_process(outcomes):
    """A forked case gives the same exit status and output as ``python script.py ...``."""
    plain = subprocess.run(
        [sys.executable, os.path.join(ROOT, "Policy_Optimization/sweep_group_size.py"), "--budget", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    forked = outcomes[0]["sweep --budget 0"][0]
    assert (plain.returncode, plain.stdout, plain.stderr) == (forked["returncode"], forked["stdout"], forked["stderr"])
