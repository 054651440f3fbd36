"""An estimator's own target (the registry's ``Estimator.own_target``; std-GRPO's g / sqrt(V (1 - V))) is read from
the registry alone: an estimator registered with one gets its own-target bias measured by the engine and saved by
the run, and the engine's helper sums, the memory plan's labels and the paired summary follow the field."""

import dataclasses

import numpy as np
import pytest
import torch

from grpo_mse.analysis import bootstrap
from grpo_mse.analysis.paired import PairedSummary, paired_summary
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients import memory_plan
from grpo_mse.gradients.engine import own_label, prompt_traces
from grpo_mse.gradients.trace_engines import EngineSettings
from grpo_mse.policy.logprobs import sequence_logprobs
from grpo_mse.runs import tracecov
from grpo_mse.tables.records import PromptRecord
from studies.advisor.simulated_records import simulated_prompt

TOY = "toy_std"  # twice std-GRPO, with twice its own target: bias^2 against it four times std-GRPO's


def _traces(model, names, value=0.4, engine="fast"):
    gen = torch.Generator().manual_seed(7)
    prompt = torch.randint(3, 23, (5,), generator=gen).tolist()
    groups = [[torch.randint(3, 23, (3,), generator=gen).tolist() for _ in range(4)] for _ in range(4)]
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])

    def logprob_fn(continuations):
        return sequence_logprobs(model, prompt, continuations, eos_ids=[1], pad_id=0)

    return prompt_traces(logprob_fn, list(model.parameters()), groups, rewards, value, names, EngineSettings(engine))


@pytest.fixture
def toy(monkeypatch):
    """A throwaway estimator registered for one test only (no other file knows it)."""
    entry = est.Estimator(
        TOY,
        "toy",
        "black",
        lambda rewards: 2.0 * est.grpo_std_weights(rewards),
        biased=True,
        needs_value=False,
        closed_form=None,
        trainer="none",
        own_target=est.OwnTarget(lambda value: 2.0 * est.std_own_target_scale(value), "toy note"),
    )
    monkeypatch.setitem(est.REGISTRY, TOY, entry)
    return entry


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_registered_estimator_with_an_own_target_gets_its_bias_measured(random_lm, toy, engine):
    names = (est.ORACLE, est.GRPO_STD, TOY)
    assert est.own_targets(names) == [est.GRPO_STD, TOY]
    stats = _traces(random_lm, names, engine=engine)
    assert own_label(est.GRPO_STD) == "grpo_std-own" and own_label(TOY) in stats.accumulators
    assert set(stats.bias2_own) == {est.GRPO_STD, TOY} and stats.bias2_own[est.GRPO_STD] != 0.0
    assert stats.traces[TOY] == pytest.approx(4.0 * stats.traces[est.GRPO_STD], rel=1e-9)
    assert stats.bias2_own[TOY] == pytest.approx(4.0 * stats.bias2_own[est.GRPO_STD], rel=1e-9)
    fields = tracecov.score_fields(stats, {"V_oracle": 0.4})
    assert fields["bias2_own"] == stats.bias2_own
    assert fields["mse_own"][TOY] == stats.traces[TOY] + stats.bias2_own[TOY]
    assert _traces(random_lm, names, value=1.0, engine=engine).bias2_own is None  # V = 1: no own target


def test_without_the_registry_field_nothing_is_measured_against_an_own_target(random_lm, monkeypatch):
    names = (est.ORACLE, est.GRPO_STD)
    config = tracecov.TracecovConfig(oracle_table="t.jsonl", save_json="out", skip_plot=True, estimators=list(names))
    params = list(random_lm.parameters())
    with_own = memory_plan.run_shape(params, config.run_sizes()).labels
    monkeypatch.setitem(est.REGISTRY, est.GRPO_STD, dataclasses.replace(est.get(est.GRPO_STD), own_target=None))
    stats = _traces(random_lm, names)
    assert stats.bias2_own is None and own_label(est.GRPO_STD) not in stats.accumulators
    assert (
        memory_plan.run_shape(params, config.run_sizes()).labels == with_own - 1
    )  # the helper sum is planned from the field too


def _records(with_own: bool) -> dict[int, list[PromptRecord]]:
    rng = np.random.default_rng(0)
    records = []
    for i in range(6):
        tr_cov = {est.ORACLE: float(rng.uniform(1, 2)), est.GRPO_STD: float(rng.uniform(1, 2))}
        own = {est.GRPO_STD: float(rng.uniform(0, 1))} if with_own else None
        mse_own = {est.GRPO_STD: tr_cov[est.GRPO_STD] + own[est.GRPO_STD]} if with_own else None
        records.append(simulated_prompt(2, i, tr_cov, 0.5, bias2_own=own, mse_own=mse_own))
    return {2: records}


def test_the_paired_summary_of_an_own_target_follows_the_registry(monkeypatch):
    for name in est.own_targets(est.ALL):  # a saved record declares each key: one field per own target
        assert f"{name}_own_target" in {f.name for f in dataclasses.fields(PairedSummary)}
    weights = bootstrap.prompt_weights(6, 50, 0)
    names = (est.ORACLE, est.GRPO_STD)
    summary = paired_summary(_records(True), [2], names, weights).to_json()
    assert summary["grpo_std_own_target"]["note"] == est.get(est.GRPO_STD).own_target.note
    assert summary["grpo_std_own_target"]["n_prompts"] == [6]
    assert "grpo_std_own_target" not in paired_summary(_records(False), [2], names, weights).to_json()
    monkeypatch.setitem(est.REGISTRY, est.GRPO_STD, dataclasses.replace(est.get(est.GRPO_STD), own_target=None))
    assert "grpo_std_own_target" not in paired_summary(_records(True), [2], names, weights).to_json()
