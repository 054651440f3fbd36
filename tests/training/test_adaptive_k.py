"""Adaptive K in the TRL backend (grpo_mse.training.adaptive_k): exact regrouping of TRL's advantages, K that
follows the advisor, a fixed-K run left unchanged, and one-line refusals of bad settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import BUILTIN_POLICY

from grpo_mse.training import adaptive_k
from grpo_mse.training.data import arithmetic_splits, write_splits

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)
# A reward with spread inside groups (the tiny policy rarely solves a problem): the completion's length mod 3.
SPREAD_REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, **_):\n    return float(len(solution_str) % 3)\n"
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adaptive_inputs")
    write_splits(arithmetic_splits(96, 8), str(folder))
    (folder / "spread_reward.py").write_text(SPREAD_REWARD)
    return {
        "model": BUILTIN_POLICY,
        "train_file": str(folder / "train.parquet"),
        "val_file": str(folder / "test.parquet"),
        "reward_path": str(folder / "spread_reward.py"),
        "output_dir": str(folder / "out"),
    }


def argv(inputs: dict, *extra: str) -> list[str]:
    base = [item for name, value in inputs.items() for item in (f"--{name}", value)]
    small = ["--budget", "32", "--group_size", "4", "--max_response_length", "4", "--test_freq", "1"]
    return base + small + ["--loggers", "[console]", "--no-save_model", "--threads", "1", *extra]


def console(text: str) -> dict[int, dict[str, float]]:
    """{step: {metric: value}} from the VERL-style lines."""
    out = {}
    for step, rest in re.findall(r"step:(\d+) - (.*)", text):
        out.setdefault(int(step), {}).update(
            {name: float(value) for name, value in (part.rsplit(":", 1) for part in rest.split(" - "))}
        )
    return out


def fake_advice(k):
    """The advisor's answer K (None: a tie, K stays); identified (intervals clear of 0) exactly when K is given."""
    return {
        "pooled": {"K_best": k, "c1": 1.0, "c2": 2.0, "c3": 3.0, "K_star_exact": "inf" if k is None else float(k)},
        "ci95": {"c1": [0.5, 2.0], "c3": [1.0, 6.0]} if k is not None else {},
        "allowed_K": [2, 4, 8, 16],
        "budget": 32,
        "recommendation": {"identified": k is not None, "message": "fake"},
    }


def record_generations(monkeypatch):
    """Wrap TRL's _generate_and_score_completions: per call, (num_generations, prompts, rewards, advantages)."""
    from trl import GRPOTrainer

    calls, original = [], GRPOTrainer._generate_and_score_completions

    def wrapped(self, inputs):
        out = original(self, inputs)
        if self.model.training:
            n = len(inputs)
            rewards = list(self._logs["rewards"]["acc"])[-n:]
            prompts = [str(p) for p in list(self._logs["prompt"])[-n:]]
            calls.append((self.num_generations, prompts, torch.tensor(rewards), out["advantages"].clone()))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", wrapped)
    return calls


def test_regroup_keeps_the_first_prompts_repeated_in_place():
    rows = [{"i": i} for i in range(8)]
    assert [r["i"] for r in adaptive_k.regroup(rows, 4)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [r["i"] for r in adaptive_k.regroup(rows, 2)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert adaptive_k.regroup(rows, 2)[0] is not rows[0]  # copies: TRL may write into a row
    with pytest.raises(ValueError, match="K=3 does not divide"):
        adaptive_k.regroup(rows, 3)
    assert adaptive_k.default_k_list(128) == [2, 4, 8, 16] and adaptive_k.default_k_list(32) == [2, 4]
    picks = adaptive_k.advisor_prompts(100, 16, seed=3)
    assert picks == adaptive_k.advisor_prompts(100, 16, seed=3) and len(set(picks)) == 16
    assert picks != adaptive_k.advisor_prompts(100, 16, seed=4)
    assert adaptive_k.chosen_k(fake_advice(None), 8) == 8 and adaptive_k.chosen_k(fake_advice(2), 8) == 2


def test_adaptive_advantages_are_the_group_normalised_rewards_of_the_k_in_force(inputs, monkeypatch, capsys):
    """The K follows the advisor's answers (2, then 4, then a tie: K stays), and at each step the advantages TRL
    computes equal (r - group mean) / (group std + 1e-4), groups of the K in force computed here independently."""
    pytest.importorskip("trl")
    from grpo_mse.training import trl_train

    answers = iter([2, 4, None])
    monkeypatch.setattr(adaptive_k, "estimate", lambda *a, **k: fake_advice(next(answers)))
    calls = record_generations(monkeypatch)
    trl_train.main(argv(inputs, "--adaptive_k_every", "1", "--max_steps", "3", "--seed", "2"))
    out = capsys.readouterr().out
    assert [c[0] for c in calls] == [2, 4, 4]
    for k, prompts, rewards, advantages in calls:
        assert len(prompts) == 32  # the budget, whatever K
        groups = [prompts[g : g + k] for g in range(0, 32, k)]
        assert all(len(set(g)) == 1 for g in groups) and len({g[0] for g in groups}) == 32 // k  # distinct prompts
        grouped = rewards.view(-1, k)
        expected = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
        assert rewards.std() > 0  # a check that could fail
        torch.testing.assert_close(advantages, expected.reshape(-1), rtol=0, atol=1e-6)
    logged = console(out)
    assert [logged[s]["trl/group_size"] for s in (1, 2, 3)] == [2.0, 4.0, 4.0]
    assert [logged[s]["adaptive_k/K"] for s in (0, 1, 2)] == [2.0, 4.0, 4.0]  # re-estimates at 0, 1, 2; not at 3
    assert "adaptive_k/K" not in logged[3] and logged[0]["adaptive_k/identified"] == 1.0
    assert "adaptive_k/K_star_exact" not in logged[2]  # infinite: left out of the numbers


def test_fixed_k_run_is_unchanged_and_equals_an_adaptive_run_that_keeps_k(inputs, monkeypatch, capsys):
    """Adaptive off: TRL's own trainer and config. One step with the REAL advisor allowed only K = 4 gives the
    same numbers as the fixed K = 4 run to the last digit (same prompts, and the advisor leaves the run's random
    streams alone)."""
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    from grpo_mse.training import trl_train
    from grpo_mse.training.trl_backend import grpo_config

    fixed_args = trl_train.parse_args(argv(inputs))
    explicit_off = trl_train.parse_args(argv(inputs, "--adaptive_k_every", "0"))
    assert grpo_config(fixed_args, 96).to_dict() == grpo_config(explicit_off, 96).to_dict()

    def untouched(*args, **kwargs):
        raise AssertionError("a fixed-K run used adaptive K")

    with monkeypatch.context() as patch:  # the fixed run never reaches the adaptive code
        patch.setattr(adaptive_k, "make_trainer_class", untouched)
        patch.setattr(adaptive_k, "estimate", untouched)
        calls = record_generations(patch)
        trl_train.main(argv(inputs, "--max_steps", "1", "--seed", "5"))
    assert [c[0] for c in calls] == [4] and type(calls) is list and GRPOTrainer.__name__ == "GRPOTrainer"
    fixed = console(capsys.readouterr().out)
    trl_train.main(
        argv(
            inputs,
            "--max_steps",
            "1",
            "--seed",
            "5",
            "--adaptive_k_every",
            "1",
            "--adaptive_k_list",
            "4",
            "--adaptive_k_T",
            "4",
            "--adaptive_k_M",
            "2",
            "--adaptive_k_n_oracle",
            "4",
        )
    )
    adaptive = console(capsys.readouterr().out)
    assert adaptive[0]["adaptive_k/K"] == 4.0 and adaptive[1]["trl/group_size"] == 4.0
    for name in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "val-core/arithmetic_zero_shot/acc/mean@1"):
        assert adaptive[1][name] == fixed[1][name], name


def test_the_advisor_leaves_the_random_streams_alone():
    import random

    import numpy as np

    def seed_and_draw(block=None):
        torch.manual_seed(1), np.random.seed(1), random.seed(1)
        if block:
            with adaptive_k.preserved_random_state():
                block()
        return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]

    reference = seed_and_draw()
    assert seed_and_draw(lambda: (torch.rand(100), np.random.rand(7), random.random())) == reference
    torch.manual_seed(1)
    torch.rand(100)
    assert torch.rand(3).tolist() != reference[0]  # without the guard the streams move


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--adaptive_k_every", "-1"], "argument --adaptive_k_every: must be >= 0"),
        (["--adaptive_k_list", "2"], "--adaptive_k_list needs --adaptive_k_every N"),
        (["--adaptive_k_every", "2", "--adaptive_k_list", "2", "3"], "--adaptive_k_list K=3 must divide 32"),
        (["--adaptive_k_every", "2", "--adaptive_k_list", "8"], "--adaptive_k_list K=8 must divide 4"),
        (["--adaptive_k_every", "2", "--adaptive_k_list", "2", "2"], "--adaptive_k_list repeats a K"),
        (["--adaptive_k_every", "2", "--adaptive_k_list", "1"], "argument --adaptive_k_list: must be >= 2"),
        (["--adaptive_k_every", "2", "--adaptive_k_T", "1"], "argument --adaptive_k_T: must be >= 2"),
        (["--adaptive_k_every", "2", "--adaptive_k_M", "1"], "argument --adaptive_k_M: must be >= 2"),
        (["--adaptive_k_every", "2", "--adaptive_k_n_oracle", "0"], "argument --adaptive_k_n_oracle: must be >= 1"),
        (["--adaptive_k_every", "2", "--adaptive_k_T", "500"], "--adaptive_k_T 500 is more than the 96 training rows"),
        (["--adaptive_k_every", "2", "--budget", "128"], "adaptive K draws 128 distinct prompts per step"),
        (["--adaptive_k_every", "2", "--budget", "24", "--group_size", "3"], "--budget 24: no power of two fits"),
    ],
)
def test_bad_adaptive_settings_are_one_line_refusals(inputs, tmp_path, extra, message):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "grpo_mse.training.trl_train", *argv({**inputs, "output_dir": str(out)}, *extra)]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error:"), result.stderr
    assert os.listdir(tmp_path) == []  # nothing written


def test_adaptive_k_follows_the_estimator_the_run_trains_with():
    """Std-normalised training (TRL's default) steers by std-GRPO's measured curve, never by GRPO's constants;
    a curve without a usable point argmin keeps K."""
    from grpo_mse.training import trl_train

    per_k = {str(k): {"error": {"estimate": 1.0 + k}} for k in (2, 8)} | {"4": {"error": {"estimate": 2.0}}}
    curve = {"estimator": "grpo_std", "K": [2, 4, 8], "K_best_point": 4, "per_K": per_k, "identified": False}
    advice = {**fake_advice(2), "estimator": "grpo_std", "measured_curve": curve}
    assert adaptive_k.chosen_k(advice, 8) == 4  # not GRPO's K_best = 2
    negative = {"per_K": {**per_k, "4": {"error": {"estimate": -0.5}}}}
    for broken in ({"K_best_point": None}, {"K_best_point": 16}, {"K_best_point": True}, {"K": None}, negative):
        assert adaptive_k.chosen_k({**advice, "measured_curve": {**curve, **broken}}, 8) == 8
    assert adaptive_k.chosen_k({**advice, "measured_curve": None}, 8) == 8
    assert adaptive_k.advice_metrics(advice, 4)["adaptive_k/std_identified"] == 0.0
    assert trl_train.advisor_estimator(SimpleNamespace(norm_adv_by_std=True)) == "grpo_std"  # TRL's default
    assert trl_train.advisor_estimator(SimpleNamespace(norm_adv_by_std=False)) == "grpo"


def test_the_advisor_measures_std_grpo_for_a_std_normalised_run():
    """estimate(..., estimator="grpo_std") on the tiny policy: the advice names the estimator and carries the
    measured curve at every allowed K; the K chosen is one it measured, or the current one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_mse.builtin.arithmetic import make_rows

    model = AutoModelForCausalLM.from_pretrained(BUILTIN_POLICY)
    tokenizer = AutoTokenizer.from_pretrained(BUILTIN_POLICY)
    rows = [{key: r[key] for key in ("prompt", "ground_truth")} for r in make_rows(4, seed=3)]
    advice = adaptive_k.estimate(
        model,
        tokenizer,
        rows,
        k_list=[2, 4],
        budget=32,
        M=2,
        n_oracle=16,
        temperature=1.0,
        max_new_tokens=6,
        seed=0,
        estimator="grpo_std",
    )
    assert advice["estimator"] == "grpo_std" and advice["measured_curve"]["K"] == [2, 4]
    assert adaptive_k.chosen_k(advice, 8) in (2, 4, 8)
