"""Algorithm 1's optimizers: AdamW and SGD ascent steps against torch, the greedy sampler, paired differences,
bad optimizer flags, an AdamW run of the shipped policy through the command line."""

from __future__ import annotations

import copy
import csv
import json

import numpy as np
import pytest
import torch

from grpo_mse.policy.sampling import HFSampler, SamplingSettings
from studies.simulation import run as run_sim
from studies.simulation import summary as sim
from studies.simulation.config import SimulationConfig
from studies.simulation.records import SimulationRecord


def linear_with_grads(grads: list[torch.Tensor]) -> torch.nn.Linear:
    """A 3 -> 2 linear layer (weights from seed 3) whose .grad are ``grads`` (weight, bias)."""
    torch.manual_seed(3)
    layer = torch.nn.Linear(3, 2)
    for param, grad in zip(layer.parameters(), grads):
        param.grad = grad.clone()
    return layer


def reference_adamw(start: torch.nn.Linear, ascent_grads: list[list[torch.Tensor]], max_norm: float, wd: float):
    """torch.optim.AdamW on a copy, stepping on the loss gradient -g clipped by hand to norm max_norm (0: none)."""
    model = copy.deepcopy(start)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    for grads in ascent_grads:
        norm = float(torch.sqrt(sum((g**2).sum() for g in grads)))
        scale = min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0
        for param, grad in zip(model.parameters(), grads):
            param.grad = -grad * scale
        optimizer.step()
    return [param.detach().clone() for param in model.parameters()]


def test_adamw_ascent_equals_torch_adamw_on_the_clipped_negated_gradient():
    """Two AdamW ascent steps from known g_hat (norm 10, then 0.5) equal torch AdamW on -clip(g_hat) computed on
    a copy; a sign error (descent), a missing clip or missing weight decay would each give other parameters."""
    torch.manual_seed(4)
    steps = [[torch.randn(2, 3), torch.randn(2)] for _ in range(2)]
    for grads, norm in zip(steps, (10.0, 0.5)):
        total = torch.sqrt(sum((g**2).sum() for g in grads))
        grads[:] = [g * norm / total for g in grads]
    layer = linear_with_grads(steps[0])
    start = copy.deepcopy(layer)
    ascent = run_sim.AdamWAscent(layer.parameters(), lr=0.01, weight_decay=0.1, max_grad_norm=1.0)
    ascent.step()
    for param, grad in zip(layer.parameters(), steps[1]):
        param.grad = grad.clone()
    ascent.step()
    got = [param.detach() for param in layer.parameters()]
    for want, have in zip(reference_adamw(start, steps, 1.0, 0.1), got):
        torch.testing.assert_close(have, want, rtol=1e-6, atol=1e-7)
    negated = [[-g for g in grads] for grads in steps]
    for wrong in (reference_adamw(start, negated, 1.0, 0.1), reference_adamw(start, steps, 0.0, 0.1)):
        assert max(float((w - h).abs().max()) for w, h in zip(wrong, got)) > 1e-3
    no_decay = reference_adamw(start, steps, 1.0, 0.0)
    assert max(float((w - h).abs().max()) for w, h in zip(no_decay, got)) > 1e-5
    # the ascent direction: the first step moves every coordinate by about +lr sign(g) (Adam's first step)
    moved = linear_with_grads(steps[0])
    run_sim.AdamWAscent(moved.parameters(), lr=0.01, weight_decay=0.0, max_grad_norm=1.0).step()
    for param, before, grad in zip(moved.parameters(), start.parameters(), steps[0]):
        torch.testing.assert_close(param.detach() - before.detach(), 0.01 * grad.sign(), rtol=1e-4, atol=1e-7)


def test_adamw_without_gradient_still_decays():
    """No active group (no .grad): the moments see a zero gradient, so the step is the weight decay alone."""
    layer = linear_with_grads([])
    start = [param.detach().clone() for param in layer.parameters()]
    run_sim.AdamWAscent(layer.parameters(), lr=0.01, weight_decay=0.5, max_grad_norm=1.0).step()
    for param, before in zip(layer.parameters(), start):
        torch.testing.assert_close(param.detach(), before * (1 - 0.01 * 0.5))


def test_sgd_ascent_is_theta_plus_lr_g_exactly():
    """The default rule, bit for bit the committed simulation's: theta + lr g_hat (parameters without .grad kept)."""
    grads = [torch.randn(2, 3, generator=torch.Generator().manual_seed(5))]  # the bias gets no .grad
    layer = linear_with_grads(grads)
    start = [param.detach().clone() for param in layer.parameters()]
    run_sim.SGDAscent(layer.parameters(), 0.3).step()
    assert torch.equal(layer.weight.detach(), torch.add(start[0], grads[0], alpha=0.3))
    assert torch.equal(layer.bias.detach(), start[1])


def test_make_optimizer_follows_the_config():
    """--optimizer picks the rule and passes lr, weight decay and clipping through."""
    model = torch.nn.Linear(2, 2)
    sgd = run_sim.make_optimizer(SimulationConfig(lr=0.5), model)
    assert isinstance(sgd, run_sim.SGDAscent) and sgd.lr == 0.5
    adamw = run_sim.make_optimizer(
        SimulationConfig(optimizer="adamw", lr=2e-5, weight_decay=0.2, max_grad_norm=0.0), model
    )
    group = adamw.optimizer.param_groups[0]
    assert isinstance(adamw, run_sim.AdamWAscent) and adamw.max_grad_norm == 0.0
    assert (group["lr"], group["weight_decay"], group["betas"], group["eps"]) == (2e-5, 0.2, (0.9, 0.999), 1e-8)


def test_greedy_sampler_takes_the_argmax_token(random_lm):
    """--heldout_greedy's sampler (nucleus of mass GREEDY_TOP_P) continues with the most likely token at each step."""
    settings = SamplingSettings(eos_ids=(22,), pad_id=0, temperature=1.0, top_p=run_sim.GREEDY_TOP_P, max_new_tokens=6)
    prompt = [1, 5, 7, 3]
    [[continuation]] = HFSampler(random_lm, settings).sample([(prompt, 1, (9,))])
    with torch.no_grad():
        logits = random_lm(torch.tensor([prompt + continuation])).logits[0]
    argmax = logits[len(prompt) - 1 : len(prompt) - 1 + len(continuation)].argmax(-1).tolist()
    assert continuation == argmax and len(continuation) >= 2


def test_paired_differences_pair_runs_at_the_same_seed():
    """a - b per (K, seed) from the last step only; a seed run with one estimator only is left out."""
    rows = [
        (2, 0, "grpo", 0.10),
        (2, 0, "naive", 0.04),
        (2, 1, "grpo", 0.20),
        (2, 1, "naive", 0.10),
        (2, 2, "grpo", 0.90),  # no vanilla ("naive") run at seed 2: unpaired, left out
        (4, 0, "oracleV", 0.30),
        (4, 0, "grpo", 0.25),
    ]
    records = [SimulationRecord(K, s, e, 3, r) for K, s, e, r in rows]
    records += [SimulationRecord(2, 0, "grpo", 1, 0.9)]  # not the last step
    diffs = sim.paired_differences(records)
    assert set(diffs) == {"grpo - naive", "oracleV - grpo"}
    cell = diffs["grpo - naive"]["2"]
    assert cell.n == 2 and cell.mean == pytest.approx(0.08)
    assert cell.ci95 == pytest.approx(12.706 * np.std([0.06, 0.10], ddof=1) / 2**0.5, rel=1e-4)
    assert diffs["oracleV - grpo"]["4"].mean == pytest.approx(0.05) and diffs["oracleV - grpo"]["4"].ci95 is None


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--optimizer", "adam"], "--optimizer"),
        (["--weight_decay", "-0.1"], "--weight_decay"),
        (["--max_grad_norm", "-1"], "--max_grad_norm"),
        (["--weight_decay", "nan"], "--weight_decay"),
        (["--optimizer", "adamw", "--heldout_greedy", "2"], "unrecognized arguments: 2"),
        (["--max_grad_norm", "0.5"], "--max_grad_norm apply to --optimizer adamw only"),
        (["--optimizer", "sgd", "--weight_decay", "0", "--max_grad_norm", "0"], "--weight_decay and --max_grad_norm"),
    ],
)
def test_bad_optimizer_flags_one_line_exit_2(tmp_path, flags, message):
    """Bad values: exit 2, one line 'error: ...' naming the flag, nothing written."""
    import subprocess
    import sys

    from conftest import ROOT

    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, f"{ROOT}/scripts/simulate_algorithm1.py", "--out_dir", str(out), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0] and "error" in lines[0]
    assert not out.exists()


@pytest.mark.slow
def test_adamw_run_on_the_shipped_policy_through_the_command_line(tmp_path):
    """A tiny real AdamW run (budget 8, 2 steps, greedy held-out metric) of the shipped policy: the documented
    outputs, a note that names AdamW and the greedy metric, and a first evaluation equal to the starting policy's
    greedy accuracy computed here independently."""
    import subprocess
    import sys

    from conftest import BUILTIN_POLICY, ROOT
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_mse.builtin.arithmetic import make_rows
    from grpo_mse.rewards.rules import row_reward
    from grpo_mse.tables.inputs import prompt_ids

    out = tmp_path / "out"
    flags = ["--model", BUILTIN_POLICY, "--budget", "8", "--K_list", "2", "4", "--seeds", "0", "--steps", "2"]
    flags += ["--optimizer", "adamw", "--lr", "1e-3", "--n_v", "2", "--train_prompts", "8", "--heldout_prompts", "5"]
    flags += ["--heldout_greedy", "--max_new_tokens", "6", "--out_dir", str(out)]
    done = subprocess.run(
        [sys.executable, f"{ROOT}/scripts/simulate_algorithm1.py", *flags], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((out / "algorithm1_summary.json").read_text())
    assert saved["config"]["optimizer"] == "adamw" and "AdamW (weight decay 0.01" in saved["note"]
    assert saved["metric"].startswith("held-out greedy accuracy (5 prompts")
    assert set(saved["paired_differences"]) == {"oracleV - grpo", "grpo - naive", "oracleV - naive"}
    with open(out / "algorithm1.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 3 * 2  # K x estimators x steps {0, 2}
    tokenizer = AutoTokenizer.from_pretrained(BUILTIN_POLICY)
    model = AutoModelForCausalLM.from_pretrained(BUILTIN_POLICY).eval()
    correct = []
    for row in make_rows(5, seed=2000, style="zero_shot"):
        ids = torch.tensor([prompt_ids(tokenizer, row["prompt"])])
        generated = model.generate(ids, do_sample=False, max_new_tokens=6, pad_token_id=tokenizer.pad_token_id)
        correct.append(row_reward(row, tokenizer.decode(generated[0, ids.shape[1] :], skip_special_tokens=True)))
    assert saved["initial_reward"] == pytest.approx(float(np.mean(correct)))
    assert all(float(row["heldout_reward"]) in {i / 5 for i in range(6)} for row in rows)
