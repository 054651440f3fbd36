"""The sampler extension point (issue 44 item 3): a new sampling backend is its module plus one entry in
``policy.sampler_backends.SAMPLERS``. A throwaway backend, written here as a module of its own, is registered
under the name ``fixed`` and run through both command lines on the shipped tiny policy: --backend accepts the
new name, the oracle and tracecov runs take their samples from it (and give its factory their batch sizes)."""

import importlib
import json
import sys
import textwrap

import pytest
from conftest import BUILTIN_POLICY, tracecov_argv

from grpo_mse.commands import oracle as oracle_command
from grpo_mse.commands import tracecov as tracecov_command
from grpo_mse.config.gradient_evaluation import OracleConfig
from grpo_mse.errors import UsageError
from grpo_mse.policy.sampler_backends import SAMPLERS, SamplerBackend

# Sample j of every request is "3" when j is even, "4" when odd, each followed by the policy's EOS.
THROWAWAY = '''
"""A throwaway sampling backend: fixed continuations, whatever the prompt."""

BUILT = []  # (batch_size, requests_per_call) of every sampler built


class FixedSampler:
    def __init__(self, settings, texts):
        self.settings, self.texts = settings, texts

    def continuation(self, j):
        return [*self.texts[j % len(self.texts)], self.settings.eos_ids[0]]

    def iter_samples(self, requests):
        for position, (_, n, _) in enumerate(requests):
            yield from ((position, self.continuation(j)) for j in range(n))

    def sample(self, requests):
        return [[self.continuation(j) for j in range(n)] for _, n, _ in requests]


def make_fixed(config, model, settings, batch_size, requests_per_call):
    BUILT.append((batch_size, requests_per_call))
    return FixedSampler(settings, TEXTS)
'''
ROWS = [(0, "24 / 8 =", 3), (1, "2 + 2 =", 4), (2, "10 / 2 =", 5)]  # golds: "3" half the samples, "4" half, never


@pytest.fixture
def fixed_backend(tmp_path, monkeypatch, builtin_policy):
    """The throwaway backend's module on sys.path and its one registration (undone after the test)."""
    _, tokenizer = builtin_policy
    texts = [tokenizer.encode(text, add_special_tokens=False) for text in ("3", "4")]
    (tmp_path / "throwaway_sampler.py").write_text(textwrap.dedent(THROWAWAY) + f"\nTEXTS = {texts!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(SAMPLERS, "fixed", SamplerBackend("throwaway_sampler:make_fixed"))
    yield importlib.import_module("throwaway_sampler")  # the module written above (not a dependency)
    sys.modules.pop("throwaway_sampler")  # a later test imports its own tmp_path module afresh


def test_an_unregistered_backend_is_refused():
    with pytest.raises(UsageError, match="--backend must be among hf, vllm"):
        OracleConfig(model=BUILTIN_POLICY, dataset="d.jsonl", backend="fixed", device="cpu")


@pytest.mark.slow
def test_a_registered_backend_runs_the_oracle_and_tracecov(tmp_path, fixed_backend):
    data = tmp_path / "rows.jsonl"
    prompt = "Solve the arithmetic problem. Return ONLY the final integer.\n"
    data.write_text(
        "".join(
            json.dumps({"id": i, "prompt": [{"role": "user", "content": prompt + q}], "ground_truth": gold}) + "\n"
            for i, q, gold in ROWS
        )
    )
    flags = ["--model", BUILTIN_POLICY, "--device", "cpu", "--dtype", "fp32", "--backend", "fixed", "--n_oracle", "8"]
    oracle_command.main([*flags, "--dataset", str(data), "--batch_size", "5", "--out_dir", str(tmp_path / "v")])
    (table,) = (tmp_path / "v").glob("*.jsonl")
    written = [json.loads(line) for line in table.read_text().splitlines()]
    assert [(r["id"], r["correct_count"], r["V_oracle"]) for r in written] == [(0, 4, 0.5), (1, 4, 0.5), (2, 0, 0.0)]
    assert {r["oracle_settings"]["backend"] for r in written} == {"fixed"}

    out = tmp_path / "tracecov"
    tracecov_command.main(tracecov_argv(table, out, "--backend", "fixed", T=3, M=2, K_list=(2,), gen_bs=7))
    (result,) = out.glob("tracecov_*_K2_detailed.json")
    prompts = json.loads(result.read_text())["prompt_results"]
    assert sorted((p["gold"], p["mean_reward"]) for p in prompts) == [(3, 0.5), (4, 0.5), (5, 0.0)]
    # the oracle asks for --batch_size sequences and prompts a call, tracecov for --gen_bs sequences, one prompt
    assert fixed_backend.BUILT == [(5, 5), (7, 1)]
