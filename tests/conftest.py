"""Shared fixtures: a tiny random Qwen2 model (no tokenizer needed) for engine-level tests."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILTIN_POLICY = os.path.join(ROOT, "assets", "tiny_policy")


def bounded(examples: int):
    """Hypothesis settings: derandomized (the same cases in every CI run), at most ``examples`` examples, no
    deadline, no example database."""
    return settings(
        derandomize=True,
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def module_scope(fixture_name: str, config) -> str:
    """A fixture scope: "module", but "function" while mutmut collects which tests reach which function
    (MUTANT_UNDER_TEST=stats). A module fixture runs inside the first test that asks for it, so mutmut would tie
    the functions it calls to that test alone and run their mutants against it only (docs/tests.md)."""
    return "function" if os.environ.get("MUTANT_UNDER_TEST") == "stats" else "module"


def load_script(relative_path: str):
    """Import a command-line script of the repository (e.g. "Gradient_evaluation/run_tracecov.py") as a module."""
    path = os.path.join(ROOT, relative_path)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(f"script_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


def tracecov_argv(table, out, *extra, model=BUILTIN_POLICY, skip_plot=True, **options) -> list[str]:
    """run_tracecov.py's arguments for ``model`` (the shipped tiny policy) on CPU in fp32: the table, the output,
    ``--skip_plot`` unless told not to, each keyword as a flag in the order given (``T=6`` -> ``--T 6``,
    ``K_list=(2, 4)`` -> ``--K_list 2 4``), then ``extra`` as is (a flag repeated there wins)."""
    argv = ["--model", model, "--oracle_table", table, "--device", "cpu", "--dtype", "fp32", "--save_json", out]
    if skip_plot:
        argv.append("--skip_plot")
    for name, value in options.items():
        argv += [f"--{name}", *(value if isinstance(value, (list, tuple)) else [value])]
    return [str(arg) for arg in [*argv, *extra]]


def one_token_sampler(model, tokenizer):
    """A PromptSampler that draws single tokens from the model's own law (temperature 1, top_p 1, seed 0)."""
    from grpo_mse.policy.loading import eos_token_ids
    from grpo_mse.policy.logprobs import PromptSampler
    from grpo_mse.policy.sampling import SamplingSettings

    settings = SamplingSettings(
        tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, temperature=1.0, top_p=1.0, max_new_tokens=1
    )
    return PromptSampler(model, tokenizer, settings, gen_bs=256, seed=0)


def random_qwen2(seed: int):
    """A 2-layer Qwen2 with vocab 23, fp32, its weights drawn after ``torch.manual_seed(seed)``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=23,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="session")
def random_lm():
    """A 2-layer Qwen2 with vocab 23, fp32, deterministic weights."""
    return random_qwen2(0)


@pytest.fixture(scope="session")
def gsm8k_test_file():
    """The installed GSM8K test split (requirements-data.txt); skips, naming the install command, without it."""
    from grpo_mse.training.installed_data import installed_path

    try:
        return installed_path("gsm8k", "test")
    except Exception as error:  # noqa: BLE001 - a DataError naming the install command
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def builtin_policy():
    """The shipped built-in policy (model, tokenizer); skips when it has not been built."""
    if not os.path.exists(os.path.join(BUILTIN_POLICY, "config.json")):
        pytest.skip("assets/tiny_policy not built (python scripts/build_tiny_policy.py)")
    from grpo_mse.policy.loading import load_policy

    return load_policy(BUILTIN_POLICY, "cpu", "fp32")


def pytest_collection_modifyitems(config, items):
    """The full user sweep (tests/acceptance) runs only when asked for with `-m acceptance`: its training cases
    take most of its time. (Here, not in a conftest of its own: the tests import this module as `conftest`.)"""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        fastest_first(items)
    if "acceptance" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="part of the full user sweep: run it with -m acceptance")
    for item in items:
        if "sweep_full" in item.keywords:
            item.add_marker(skip)


def fastest_first(items) -> None:
    """Under mutmut, run a mutant's test files in the order of their durations as mutmut recorded them, fastest
    first, each file's tests together in their own order. mutmut stops at the first failure (-x) but hands the
    tests over in a set's arbitrary order, which runs the slow files as often as the quick ones and splits files,
    setting their module fixtures up again each time; most mutants fall to a quick unit test. The order changes no
    verdict, only how soon a killed mutant is done (docs/tests.md). The file is mutmut 3.8's, in the mutants/ folder
    each mutant's run starts in; without it, the order is left alone."""
    try:
        with open("mutmut-stats.json", encoding="utf-8") as handle:
            durations = json.load(handle).get("duration_by_test", {})
    except (OSError, ValueError):
        return
    files: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        files[path] = files.get(path, 0.0) + durations.get(item.nodeid, 0.0)
    items.sort(key=lambda item: files[item.nodeid.split("::")[0]])


MEMORY_LINES = re.compile(r"memory: about ([\d.e+-]+) GB needed.*\n(?:.*\n)*?memory: peak ([\d.e+-]+) GB")


def estimate_and_peak(stderr: str) -> tuple[float, float]:
    """(the plan's GB, the measured peak's GB) from run_tracecov.py's two memory lines."""
    found = MEMORY_LINES.search(stderr)
    assert found, stderr[-2000:]
    return float(found.group(1)), float(found.group(2))
