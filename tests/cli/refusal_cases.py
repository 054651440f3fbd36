"""The refusal cases of issue 13's rules (never destroy, never mix, never a silent wrong number, one line) and
the builders of their command lines and files, run by test_refusals.py."""

import hashlib
import json
from dataclasses import dataclass, field

from conftest import BUILTIN_POLICY, tracecov_argv

from grpo_mse.gradients.estimators import UNBIASED
from grpo_mse.policy.model_source import model_fingerprint

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


RULE_CASES = [  # the rules of issue 13
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
        "ground_truth 'abc', not a well-formed number (answers are read as",
        setup=(table({"ground_truth": "abc"}),),
    ),
    Case(
        "ground truth #### 72",
        oracle(),
        "ground_truth '#### 72', not a well-formed number (answers are read as",
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
    # issue 54, item 10: a prefix of a flag is not taken as the flag (argparse's allow_abbrev off)
    Case("--max_memory prefix", tracecov("--max_memory", "5"), "--max_memory 5 (did you mean --max_memory_gb?)"),
    Case("--estimator prefix", tracecov("--estimator", "grpo"), "--estimator grpo (did you mean --estimators?)"),
    Case("--resum prefix", tracecov("--resum"), "--resum (did you mean --resume?)"),
    Case("--paper_model prefix", ["plots/make_figures.py", "--paper_model", "x"], "(did you mean --paper_models?)"),
    Case("--max_memory_gb inf", tracecov("--max_memory_gb", "inf"), "leave the flag out", setup=(table(),)),
    Case(  # issue 54, item 5: the cap as given, not what the process held, and the way out
        "--max_memory_gb 1e-9",
        tracecov("--max_memory_gb", "1e-9"),
        "1e-09 GB allowed by --max_memory_gb",
        setup=(table(),),
    ),
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
]
