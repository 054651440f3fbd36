"""The typed run configs make exactly the original flags, validate values, and the scripts parse before torch."""

import dataclasses
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT

from grpo_mse.config.gradient_evaluation import SKETCH_FIELDS, OracleConfig, TracecovConfig
from grpo_mse.errors import UsageError

TRACECOV_DEFAULTS = {  # the original run_tracecov.py's flags and defaults (SPEC section 3 and later additions)
    "model": "Qwen/Qwen2.5-0.5B-Instruct",
    "revision": "main",
    "device": "cuda",
    "dtype": "bf16",
    "trust_remote_code": False,
    "oracle_table": "t.jsonl",
    "seed": 0,
    "T": 500,
    "M": 16,
    "K_list": [4, 8, 16, 32, 64],
    "temperature": 1.0,
    "top_p": 0.95,
    "max_new_tokens": 32,
    "gen_bs": 64,
    "subsample_prompts": None,
    "save_json": "out",
    "plot_path": None,
    "skip_plot": True,
    "engine": "fast",
    "groups_per_pass": 0,
    "estimators": ["naive", "grpo", "oracleV"],
    "drop_eos": False,
    "shared_samples": False,
    "no_advisor": False,
    "max_memory_gb": None,
    "c1_batch": 16,
    "backend": "hf",
    "vllm_gpu_util": 0.4,
    "vllm_enforce_eager": False,
    "vllm_max_model_len": None,
    "resume": False,
    "score_distribution": "model",
    "answer_rule": "row",
    "advisor_estimator": "grpo",
    "budget": 1024,
    "allowed_K": None,
}
ORACLE_DEFAULTS = {  # the original calculate_oracle_v.py's (SPEC section 2 and later additions)
    "model": "m",
    "revision": "main",
    "device": "cuda",
    "dtype": "fp16",
    "trust_remote_code": False,
    "dataset": "d.jsonl",
    "split": "train",
    "n_oracle": 1000,
    "batch_size": 32,
    "seed": 0,
    "temperature": 1.0,
    "top_p": 0.95,
    "max_new_tokens": 32,
    "out_dir": "oracle_v_results",
    "limit": None,
    "sample": None,
    "backend": "hf",
    "vllm_gpu_util": 0.4,
    "vllm_enforce_eager": False,
    "vllm_max_model_len": None,
    "resume": False,
    "answer_rule": "row",
}


def test_defaults_and_saved_keys_are_the_original_flags():
    tracecov = TracecovConfig.from_argv(["--oracle_table", "t.jsonl", "--save_json", "out", "--skip_plot"])
    # record() adds the model's fingerprint (a hub id: hub:<id>@<revision>) to the flags
    assert tracecov.record() == {**TRACECOV_DEFAULTS, "model_fingerprint": "hub:Qwen/Qwen2.5-0.5B-Instruct@main"}
    oracle = OracleConfig.from_argv(["--model", "m", "--dataset", "d.jsonl"])
    assert oracle.record() == {**ORACLE_DEFAULTS, "model_fingerprint": "hub:m@main"}
    # every result field is a flag, except the content fingerprints of the table and the model, and the sketch's
    # settings, which only a sketched run saves (the other engines' saved configs stay as they were)
    fingerprints = {"oracle_table_fingerprint", "model_fingerprint"}
    assert set(TracecovConfig.RESULT_FIELDS) - fingerprints - set(SKETCH_FIELDS) < set(TRACECOV_DEFAULTS)
    sketched = TracecovConfig.from_argv(
        ["--oracle_table", "t.jsonl", "--save_json", "out", "--skip_plot", "--engine", "sketched", "--sketch_seed", "3"]
    )
    assert {name: sketched.record()[name] for name in SKETCH_FIELDS} == {
        "sketch_dim": 1 << 20,
        "sketch_blocks": 4,
        "sketch_seed": 3,
    }
    assert set(OracleConfig.RESULT_FIELDS) - {"model_fingerprint"} < set(ORACLE_DEFAULTS)


def test_every_flag_is_parsed_into_its_field():
    argv = [
        "--model",
        "x/y",
        "--revision",
        "r",
        "--device",
        "cuda:0",
        "--dtype",
        "fp32",
        "--trust_remote_code",
        "--oracle_table",
        "t",
        "--seed",
        "3",
        "--T",
        "7",
        "--M",
        "5",
        "--K_list",
        "2",
        "6",
        "--temperature",
        "0.5",
        "--top_p",
        "0.9",
        "--max_new_tokens",
        "4",
        "--gen_bs",
        "8",
        "--subsample_prompts",
        "9",
        "--save_json",
        "s",
        "--plot_path",
        "p",
        "--engine",
        "reference",
        "--groups_per_pass",
        "2",
        "--estimators",
        "grpo",
        "drgrpo",
        "--drop_eos",
        "--shared_samples",
        "--no_advisor",
        "--max_memory_gb",
        "12.5",
        "--c1_batch",
        "4",
        "--backend",
        "vllm",
        "--vllm_gpu_util",
        "0.5",
        "--vllm_enforce_eager",
        "--vllm_max_model_len",
        "300",
        "--resume",
        "--score_distribution",
        "sampling",
        "--advisor_estimator",
        "grpo_std",
        "--budget",
        "256",
        "--allowed_K",
        "2",
        "8",
        "--answer_rule",
        "final_answer",
    ]
    config = TracecovConfig.from_argv(argv)
    assert config.record() == {
        "model": "x/y",
        "revision": "r",
        "device": "cuda:0",
        "dtype": "fp32",
        "trust_remote_code": True,
        "oracle_table": "t",
        "seed": 3,
        "T": 7,
        "M": 5,
        "K_list": [2, 6],
        "temperature": 0.5,
        "top_p": 0.9,
        "max_new_tokens": 4,
        "gen_bs": 8,
        "subsample_prompts": 9,
        "save_json": "s",
        "plot_path": "p",
        "skip_plot": False,
        "engine": "reference",
        "groups_per_pass": 2,
        "estimators": ["grpo", "drgrpo"],
        "drop_eos": True,
        "shared_samples": True,
        "no_advisor": True,
        "max_memory_gb": 12.5,
        "c1_batch": 4,
        "backend": "vllm",
        "vllm_gpu_util": 0.5,
        "vllm_enforce_eager": True,
        "vllm_max_model_len": 300,
        "resume": True,
        "score_distribution": "sampling",
        "answer_rule": "final_answer",
        "advisor_estimator": "grpo_std",
        "budget": 256,
        "allowed_K": [2, 8],
        "model_fingerprint": "hub:x/y@r",
    }
    assert not config.with_advisor


def test_list_defaults_are_not_shared_between_configs():
    first = TracecovConfig(oracle_table="t", save_json="s", skip_plot=True)
    first.K_list.append(128)
    assert TracecovConfig(oracle_table="t", save_json="s", skip_plot=True).K_list == [4, 8, 16, 32, 64]


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"M": 1}, "--M must be >= 2"),
        ({"K_list": [4, 1]}, "--K_list"),
        ({"T": 0}, "--T must be >= 1"),
        ({"skip_plot": False}, "--plot_path is required"),
        ({"top_p": 0.0}, "--top_p"),
        ({"groups_per_pass": -1}, "--groups_per_pass"),
        ({"engine": "slow"}, "--engine must be among fast, reference"),
        ({"estimators": ["grpo", "x"]}, "--estimators"),
        ({"dtype": "fp8"}, "--dtype"),
        ({"c1_batch": 0}, "--c1_batch"),
        ({"c1_batch": 1}, "--c1_batch 1 leaves no pair"),
        ({"seed": -1}, "--seed must be >= 0"),
        ({"temperature": 1e-300}, "--temperature must be >= 0.01"),
        ({"temperature": float("inf")}, "--temperature"),
        ({"budget": 3}, "--budget 3 is odd"),
        ({"budget": 64, "allowed_K": [3, 5]}, "must divide --budget 64"),
    ],
)
def test_tracecov_config_rejects_values_that_cannot_work(changes, needle):
    with pytest.raises(UsageError, match=needle):
        TracecovConfig(**{"oracle_table": "t", "save_json": "s", "skip_plot": True, **changes})


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"n_oracle": 0}, "--n_oracle"),
        ({"batch_size": 0}, "--batch_size"),
        ({"temperature": 0.0}, "--temperature"),
        ({"backend": "tgi"}, "--backend"),
    ],
)
def test_oracle_config_rejects_values_that_cannot_work(changes, needle):
    with pytest.raises(UsageError, match=needle):
        OracleConfig(**{"model": "m", "dataset": "d", **changes})


def test_required_fields_have_no_default():
    with pytest.raises(TypeError):
        OracleConfig(dataset="d")  # --model is required for the oracle run
    required = {
        f.name
        for f in dataclasses.fields(TracecovConfig)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    assert required == {"oracle_table", "save_json"}


HEAVY = ("torch", "transformers", "pandas", "matplotlib", "datasets", "numpy", "tqdm")


@pytest.mark.parametrize(
    "script",
    ["Gradient_evaluation/run_tracecov.py", "Gradient_evaluation/calculate_oracle_v.py", "plots/make_figures.py"],
)
def test_help_is_fast_and_imports_nothing_heavy(script):
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-X", "importtime", os.path.join(ROOT, script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    seconds = time.perf_counter() - start
    assert result.returncode == 0 and "usage:" in result.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert seconds < 1.5  # about 0.1 s on a quiet machine; generous for busy CI runners
