"""A new statistics engine is one file plus one registry entry (issue 57): a naive engine written here into a folder
of its own (it keeps every group's vector of every label and computes the trace from them directly), registered by
one entry in ``trace_engines.ENGINES``, runs through ``prompt_traces`` and through ``run_tracecov.py --engine``
and agrees with the fast engine on the same samples. The registry itself stays torch-free."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import BUILTIN_POLICY, ROOT, load_script, tracecov_argv

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients import trace_engines
from grpo_mse.gradients.engine import prompt_traces
from grpo_mse.gradients.trace_engines import EngineSettings

NAME = "naive_toy"
TABLE = os.path.join(ROOT, "results/demo/oracle_v_n256_tiny_policy_20261201_225502.jsonl")

# The whole engine: its accumulators (statistics.Accumulator: count, trace, mean) and its TraceEngine.
TOY_ENGINE = '''"""A naive engine: a backward pass per label and group, every vector kept, the trace taken directly."""

import torch

from grpo_mse.gradients.engine import gradient
from grpo_mse.gradients.statistics import Accumulator
from grpo_mse.gradients.trace_engines import TraceEngine


class KeptVectors(Accumulator):
    """Every vector x_g as one flat float64 tensor."""

    def __init__(self, params):
        self.params, self.vectors = params, []

    @property
    def count(self):
        return len(self.vectors)

    def add(self, vector):
        self.vectors.append(torch.cat([t.reshape(-1).double() for t in vector]))

    def trace(self):
        stacked = torch.stack(self.vectors)
        return float(((stacked - stacked.mean(0)) ** 2).sum() / (len(stacked) - 1))

    def mean(self):
        flat, out, start = torch.stack(self.vectors).mean(0), [], 0
        for p in self.params:
            out.append(flat[start : start + p.numel()].view(p.shape).to(p.dtype))
            start += p.numel()
        return out


def accumulate(work, settings, pool=None):
    stats = {label: KeptVectors(work.params) for label in work.labels}
    for group, group_rewards in zip(work.groups, work.rewards):
        logprobs = work.logprob_fn(group)
        weights = work.weights(group_rewards.to(logprobs.device, torch.float64))
        for index, label in enumerate(work.labels):
            loss = (weights[label].to(logprobs.dtype) * logprobs).sum()
            stats[label].add(gradient(loss, work.params, retain=index < len(work.labels) - 1))
    return stats


ENGINE = TraceEngine(accumulate, shared_prompt=False)
'''


@pytest.fixture
def toy_engine(tmp_path, monkeypatch):
    """The naive engine: its one file (in a folder on sys.path) and its one registry entry, for this test only."""
    folder = tmp_path / "engines"
    folder.mkdir()
    (folder / "naive_toy_engine.py").write_text(TOY_ENGINE)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setitem(trace_engines.ENGINES, NAME, "naive_toy_engine:ENGINE")
    yield NAME
    sys.modules.pop("naive_toy_engine", None)


def _groups(m: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, 23, (5,), generator=gen).tolist()
    groups = [[torch.randint(3, 23, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen).tolist()
               for _ in range(k)] for _ in range(m)]  # fmt: skip
    rewards = torch.randint(0, 2, (m, k), generator=gen).double()
    rewards[0], rewards[1] = 1.0, torch.arange(k) % 2  # equal rewards, and mixed ones
    return prompt, groups, rewards


def bigram_logprob_fn(prompt: list[int], seed: int = 0):
    """(params, logprob_fn) of a float64 bigram policy: log pi(y_t | y_{t-1}) = log_softmax(E[y_{t-1}] W)[y_t], every
    operation in float64 (an HF model rounds through float32 inside its RMSNorm even in float64: the two engines'
    rounding orders then differ by about 1e-8 there, not by float64 rounding)."""
    gen = torch.Generator().manual_seed(seed)
    embedding = torch.randn(23, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    output = torch.randn(8, 23, generator=gen, dtype=torch.float64, requires_grad=True)

    def logprob_fn(continuations):
        sums = []
        for tokens in continuations:
            previous = torch.tensor([prompt[-1], *tokens[:-1]])
            logprobs = torch.log_softmax(embedding[previous] @ output, dim=-1)
            sums.append(logprobs[torch.arange(len(tokens)), torch.tensor(tokens)].sum())
        return torch.stack(sums)

    return [embedding, output], logprob_fn


def test_a_registered_engine_agrees_with_the_fast_engine_through_prompt_traces(toy_engine):
    """Every statistic a prompt gives (traces, squared biases against g and against std-GRPO's own target, the
    score's) from the naive engine equals the fast engine's to 1e-9 relative on a float64 policy."""
    prompt, groups, rewards = _groups(5, 4, seed=3)
    params, logprob_fn = bigram_logprob_fn(prompt)
    out = {
        name: prompt_traces(logprob_fn, params, groups, rewards, 0.4, est.ALL, EngineSettings(name, measure_score=True))
        for name in ("fast", toy_engine)
    }
    fast, toy = out["fast"], out[toy_engine]
    assert type(toy.accumulators[est.ORACLE]).__name__ == "KeptVectors"  # the registered engine ran
    assert set(toy.accumulators) == set(fast.accumulators) and set(toy.bias2) == set(fast.bias2) == set(est.BIASED)
    assert min(fast.traces.values()) > 0
    for name in est.ALL:
        assert toy.traces[name] == pytest.approx(fast.traces[name], rel=1e-9)
    for name in fast.bias2:
        assert toy.bias2[name] == pytest.approx(fast.bias2[name], rel=1e-9, abs=1e-15)
    assert toy.bias2_own[est.GRPO_STD] == pytest.approx(fast.bias2_own[est.GRPO_STD], rel=1e-9)
    assert toy.score_trace == pytest.approx(fast.score_trace, rel=1e-9)
    assert toy.mean_score_sq == pytest.approx(fast.mean_score_sq, rel=1e-9, abs=1e-15)
    toy.release()  # the interface's default: nothing pooled, nothing to give back


def _per_prompt(folder) -> dict:
    """{(K, prompt index): (tr_cov, bias2)} of a run's per-K files."""
    out = {}
    for path in glob.glob(os.path.join(folder, "tracecov_*_K*_detailed.json")):
        data = json.load(open(path))
        for record in data["prompt_results"]:
            out[(data["K"], record["prompt_index"])] = (record["tr_cov"], record.get("bias2") or {})
    return out


@pytest.mark.slow
def test_a_registered_engine_runs_through_run_tracecov(tmp_path, toy_engine, capsys):
    """``run_tracecov.py --engine naive_toy`` on the built-in tiny policy (fp32, the finest --dtype; advisor on): the
    same samples as ``--engine fast`` (same seeds), per-prompt traces, squared biases and the advisor's c1 within
    float32 rounding of its (measured: traces within 2e-5 relative, squared biases 8e-5), the engine's name saved
    in the run's config. The agreement to 1e-9 (float64) is the test above."""
    if not os.path.exists(os.path.join(BUILTIN_POLICY, "config.json")):
        pytest.skip("assets/tiny_policy not built (python scripts/build_tiny_policy.py)")
    script = load_script("Gradient_evaluation/run_tracecov.py")
    flags = dict(T=3, M=3, K_list=(2, 4), estimators=("naive", "grpo", "oracleV", "grpo_std"))
    runs, c1 = {}, {}
    for name in ("fast", toy_engine):
        out = tmp_path / name
        script.main(tracecov_argv(TABLE, out, engine=name, **flags))
        saved = json.load(open(glob.glob(str(out / "tracecov_*[0-9].json"))[0]))
        assert saved["config"]["engine"] == name
        runs[name] = _per_prompt(out)
        c1[name] = [saved["group_size_advisor"]["per_K"][str(k)]["c1"]["estimate"] for k in flags["K_list"]]
    assert "results:" in capsys.readouterr().out
    fast, toy = runs["fast"], runs[toy_engine]
    assert set(toy) == set(fast) and len(fast) == 6
    for key, (traces, bias2) in fast.items():
        assert toy[key][0] == pytest.approx(traces, rel=1e-4, abs=1e-9)
        assert toy[key][1] == pytest.approx(bias2, rel=1e-3, abs=1e-7)
    assert any(t > 0 for traces, _ in fast.values() for t in traces.values())
    # the advisor's hook reads the new engine's accumulators through the interface (kept_mean's default)
    assert c1[toy_engine] == pytest.approx(c1["fast"], rel=1e-4) and all(value != 0 for value in c1["fast"])


def test_the_registry_names_the_engines_without_importing_torch():
    """--help reads --engine's choices from the registry: importing it (and the config) loads no torch, and an unknown
    name is refused naming the choices."""
    code = (
        "import sys; from grpo_mse.gradients import trace_engines; import grpo_mse.config.gradient_evaluation; "
        "print(sorted(trace_engines.ENGINES), 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.split("]")[-1].strip() == "False", done.stderr
    assert "'fast', 'reference'" in done.stdout
    with pytest.raises(ValueError, match="unknown engine 'nope'; choose from fast, reference"):
        trace_engines.load("nope")
