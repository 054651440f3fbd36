"""Algorithm 1 simulation: an SGD step moves theta by lr * (exact gradient) on average; the script runs end to end."""

from __future__ import annotations

import copy
import csv
import json

import numpy as np
import pytest
import torch

from grpo_mse.policy.sampling import HFSampler, SamplingSettings
from studies.exact import theory
from studies.simulation import run as run_sim
from studies.simulation import simulate_algorithm1 as simulate_algorithm1_command
from studies.simulation import summary as sim

PROMPT = [1, 5, 7, 3]
LR = 0.1


def token_reward(token: int) -> float:
    """G(y) = 1 iff the token id is a multiple of 3."""
    return float(token % 3 == 0)


def one_token_pool() -> run_sim.PromptPool:
    """A single prompt whose reward is computed from the first (only) generated token."""
    return run_sim.PromptPool([PROMPT], lambda index, continuations: [token_reward(c[0]) for c in continuations])


def step_deltas(model, estimator: str, K: int, steps: int, baseline) -> np.ndarray:
    """[steps, P] parameter changes (theta_after - theta_0) / lr of independent steps from the same theta_0."""
    params = list(model.parameters())
    start = torch.nn.utils.parameters_to_vector(params).detach().clone()
    sampler = HFSampler(
        model, SamplingSettings(eos_ids=(22,), pad_id=0, temperature=1.0, top_p=1.0, max_new_tokens=1), batch_size=64
    )
    pool, deltas = one_token_pool(), []
    for step in range(steps):
        run_sim.policy_step(
            pool,
            [0],
            K=K,
            estimator=estimator,
            optimizer=run_sim.SGDAscent(model.parameters(), LR),
            sampler=sampler,
            key=(7, step),
            baseline=baseline(sampler),
        )
        with torch.no_grad():
            deltas.append(((torch.nn.utils.parameters_to_vector(params) - start) / LR).double().numpy())
            torch.nn.utils.vector_to_parameters(start.clone(), params)  # params become views of the copy
    return np.stack(deltas)


class ExactValue:
    """The true V(x) from enumeration (a perfect oracle)."""

    def __init__(self, value: float):
        self.value = value

    def __call__(self, pool, indices, key):
        return torch.full((len(indices),), self.value, dtype=torch.float64)

    def observe(self, indices, rewards):
        pass


@pytest.fixture(scope="module")
def one_token_case(random_lm):
    """(a private copy of the random LM, exact enumeration of its one-token continuations), on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # several times faster for this tiny model
    model = copy.deepcopy(random_lm)
    yield model, theory.one_token_enumeration(model, PROMPT, token_reward, temperature=1.0)
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize(
    "estimator,baseline", [("oracleV", "mc"), ("oracleV", "exact"), ("grpo", None), ("naive", None)]
)
def test_sgd_step_follows_exact_gradient_in_expectation(one_token_case, estimator, baseline):
    """E[(theta' - theta) / lr] = g = sum_y p(y) G(y) grad log p(y): ||mean - g||^2 <= 4 tr Cov(mean)."""
    model, exact = one_token_case
    make = {
        "mc": lambda sampler: run_sim.MonteCarloValue(4, sampler),
        "exact": lambda sampler: ExactValue(exact.moments().V),
        None: lambda sampler: None,
    }[baseline]
    deltas = step_deltas(model, estimator, K=8, steps=150, baseline=make)
    mean = deltas.mean(0)
    trace_cov_of_mean = deltas.var(0, ddof=1).sum() / len(deltas)
    distance = float(((mean - exact.g) ** 2).sum())
    assert distance <= 4 * trace_cov_of_mean
    assert 4 * trace_cov_of_mean < 0.25 * float(exact.g @ exact.g)  # power: a bias of half of g would be seen


@pytest.mark.slow
def test_biased_estimator_is_detected(one_token_case):
    """Negative control: std-normalised GRPO is biased, and the same check rejects it."""
    model, exact = one_token_case
    deltas = step_deltas(model, "grpo_std", K=8, steps=150, baseline=lambda sampler: None)
    trace_cov_of_mean = deltas.var(0, ddof=1).sum() / len(deltas)
    assert float(((deltas.mean(0) - exact.g) ** 2).sum()) > 4 * trace_cov_of_mean


def test_batched_logprobs_equal_shared_prompt_logprobs(random_lm):
    """One padded pass over prompts of different lengths gives the per-group log-probabilities and gradients."""
    from grpo_mse.policy.logprobs import shared_prompt_logprobs
    from studies.simulation.run import prompts_logprobs

    prompts = [[1, 5, 7], [4, 2, 9, 9, 3]]
    groups = [[[3, 22], [8, 8, 8]], [[5], [6, 7, 22]]]
    params = list(random_lm.parameters())
    batched = prompts_logprobs(random_lm, prompts, groups, eos_ids=[22], pad_id=0)
    grad_batched = torch.autograd.grad(batched.sum(), params)
    single = torch.stack(
        [
            shared_prompt_logprobs(random_lm, prompt, group, eos_ids=[22], pad_id=0)
            for prompt, group in zip(prompts, groups)
        ]
    )
    grad_single = torch.autograd.grad(single.sum(), params)
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)
    for a, b in zip(grad_batched, grad_single):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_draw_groups_same_in_both_paths(random_lm, monkeypatch):
    """Per-prompt (shared prompt cache) and all-rows-together sampling give the same continuations."""
    pool = run_sim.PromptPool([[1, 5, 7], [4, 2, 9, 9, 3]], lambda index, continuations: [0.0] * len(continuations))
    sampler = HFSampler(random_lm, SamplingSettings(eos_ids=(22,), pad_id=0, max_new_tokens=4), batch_size=256)
    together = run_sim.draw_groups(pool, [1, 0], 3, sampler, (5, 6))
    monkeypatch.setattr(run_sim, "SHARED_PREFILL_MIN", 2)
    assert run_sim.draw_groups(pool, [1, 0], 3, sampler, (5, 6)) == together


def test_running_value_uses_only_earlier_visits():
    """The running V of a prompt is the prior before its first visit, then an EMA of its group means."""
    value = run_sim.RunningValue(alpha=0.5, prior=0.5)
    assert value(None, [3], None).tolist() == [0.5]
    value.observe([3], torch.tensor([[1.0, 1.0]]))
    assert value(None, [3, 4], None).tolist() == [0.75, 0.75]


def test_best_k_and_agreement():
    """best K = argmax of the mean; the verdict compares it with the grid K nearest to K* (log2 scale)."""
    table = {"2": {"mean": 0.3, "ci95": 0.01}, "4": {"mean": 0.5, "ci95": 0.05}, "8": {"mean": 0.47, "ci95": 0.05}}
    best, near = sim.best_group_sizes(table)
    assert (best, near) == (4, [4, 8])
    assert sim.agreement(best, near, 3.5, [2, 4, 8])[0] == "agrees"
    assert sim.agreement(best, near, 7.0, [2, 4, 8])[0] == "consistent within noise"
    assert sim.agreement(best, near, 2.1, [2, 4, 8])[0] == "disagrees"
    assert sim.agreement(best, near, None, [2, 4, 8])[0] == "no K*"
    assert sim.learning_statement({"grpo": table}, 0.4).startswith("learning happened: e.g. grpo K=4")
    assert sim.learning_statement({"grpo": table}, 0.46).startswith("no measurable learning")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A saved 1-layer Qwen2 (hidden 16) with a BPE tokenizer trained on a few arithmetic rows."""
    from transformers import GenerationConfig

    from studies.builders import tiny_policy as tp

    rows = tp.training_rows(200)
    tokenizer = tp.build_tokenizer(tp.tokenizer_texts(rows), vocab_size=128)
    eos = tokenizer.convert_tokens_to_ids(tp.IM_END)
    model = tp.build_model(
        len(tokenizer),
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=32,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=eos,
    )
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
    path = tmp_path_factory.mktemp("sim_model")
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return str(path)


@pytest.mark.slow
def test_script_end_to_end(tiny_model_dir, tmp_path):
    """Tiny sweep: CSV with the documented columns, summary JSON with CIs, best K and K*, PNG and PDF figure."""
    simulate_algorithm1 = simulate_algorithm1_command

    advisor = tmp_path / "tracecov_test.json"
    pooled = {"c1": 1.0, "c2": 2.0, "c3": 4.0, "K_star_exact": 3.0}
    ci = {"c1": [0.5, 2.0], "c3": [2.0, 8.0], "K_star_exact": [2.0, 4.5]}  # identified: K* = 1 + sqrt(4/1)
    advisor.write_text(json.dumps({"group_size_advisor": {"pooled": pooled, "ci95": ci, "budget": 64}}))
    out = tmp_path / "out"
    flags = [
        "--model",
        tiny_model_dir,
        "--budget",
        "8",
        "--K_list",
        "2",
        "4",
        "--seeds",
        "0",
        "1",
        "--steps",
        "2",
        "--eval_every",
        "1",
        "--lr",
        "0.5",
        "--n_v",
        "2",
        "--train_prompts",
        "8",
        "--heldout_prompts",
        "3",
        "--heldout_samples",
        "2",
        "--max_new_tokens",
        "3",
        "--out_dir",
        str(out),
        "--advisor_json",
        str(advisor),
    ]
    summary = simulate_algorithm1.main(flags)
    again = simulate_algorithm1.main(flags + ["--records_csv", str(out / "algorithm1.csv")])  # summary only
    assert again["final_reward"] == summary["final_reward"] and again["wall_s"] == summary["wall_s"]
    with open(out / "algorithm1.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["K", "seed", "estimator", "step", "heldout_reward"]
    assert len(rows) == 2 * 2 * 3 * 3  # K x seeds x estimators x steps {0, 1, 2}
    assert {row["step"] for row in rows} == {"0", "1", "2"}
    assert all(0.0 <= float(row["heldout_reward"]) <= 1.0 for row in rows)
    saved = json.loads((out / "algorithm1_summary.json").read_text())
    assert saved["final_reward"] == summary["final_reward"]
    assert set(saved["final_reward"]) == {"naive", "grpo", "oracleV"}
    assert set(saved["final_reward"]["grpo"]["2"]) == {"mean", "sd", "ci95", "n"}
    cell = saved["final_reward"]["grpo"]["2"]
    assert cell["n"] == 2 and cell["ci95"] == pytest.approx(12.706 * cell["sd"] / 2**0.5)  # Student t, 1 df
    assert set(saved["best_K"].values()) <= {2, 4}
    assert saved["advisor"]["K_star"] == 3.0
    assert saved["agreement"]["verdict"] in {"agrees", "consistent within noise", "disagrees"}
    assert "noisy oracle" in saved["note"] and "K* = 3" in saved["note"]
    assert (out / "algorithm1.png").stat().st_size > 0 and (out / "algorithm1.pdf").stat().st_size > 0
