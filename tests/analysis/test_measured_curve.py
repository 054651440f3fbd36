"""Std-GRPO's budgeted error measured at each K (grpo_mse.analysis.measured_curve) against a generator whose
answer is known: per prompt a mean m_i and a bias d_i drawn around known centres, M noisy group estimates of each;
the truth is (K/N)(tr Cov(X | x) + Var m) + ||E d||^2. Also the best K and the --advisor_estimator flag."""

import dataclasses
import glob
import json

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap, measured_curve
from grpo_mse.config.gradient_evaluation import TracecovConfig
from grpo_mse.errors import UsageError
from grpo_mse.gradients.estimators import GRPO_STD
from studies.advisor.simulated_records import simulated_batch, simulated_prompt

DIM, M, BUDGET = 3, 4, 64


def group_means(rng, centres, noise_sd):
    """Per prompt: the mean of M noisy draws around its centre and one draw's unbiased trace of covariance."""
    draws = centres[:, None, :] + rng.normal(0.0, noise_sd, size=(len(centres), M, DIM))
    return draws.mean(1), draws.var(1, ddof=1).sum(1)


def gram_entry(means, traces, members):
    return {"gram": (means[members] @ means[members].T).tolist(), "within_each": list(traces[members] / M)}


def dataset(rng, k, spread, noise, bias_centre, n_prompts=24, batch=6):
    """Records and c1 batches of one K in the shape run_tracecov writes."""
    m = rng.normal(1.0, spread, size=(n_prompts, DIM))
    d = bias_centre + rng.normal(0.0, 0.5, size=(n_prompts, DIM))
    x_mean, x_trace = group_means(rng, m, noise)
    d_mean, d_trace = group_means(rng, d, 0.7)
    records = [simulated_prompt(k, i, {GRPO_STD: float(x_trace[i])}) for i in range(n_prompts)]
    batches = []
    for start in range(0, n_prompts, batch):
        members = list(range(start, start + batch))
        grams = {
            GRPO_STD: gram_entry(x_mean, x_trace, members),
            measured_curve.BIAS_GRAM: gram_entry(d_mean, d_trace, members),
        }
        oracle = gram_entry(x_mean, x_trace, members)  # the oracle's place; unused here
        batches.append(simulated_batch(k, members, oracle["gram"], oracle["within_each"], grams))
    return records, batches


def test_measured_error_is_unbiased_for_the_known_budgeted_error():
    rng = np.random.default_rng(0)
    spread, noise, centre, k = 0.8, 1.5, np.array([0.3, -0.2, 0.1]), 4
    truth = k / BUDGET * (DIM * noise**2 + DIM * spread**2) + float(centre @ centre)
    estimates = []
    for _ in range(400):
        records, batches = dataset(rng, k, spread, noise, centre)
        _, position = bootstrap.prompt_columns({k: records})
        weights = bootstrap.prompt_weights(len(records), 1, 0)[:1]  # the data row only
        estimates.append(float(measured_curve.error_at(records, batches, k, BUDGET, position, weights).error[0]))
    mean, se = np.mean(estimates), np.std(estimates, ddof=1) / np.sqrt(len(estimates))
    assert abs(mean - truth) < 4 * se, (mean, truth, se)
    assert se < 0.05 * truth  # the check has power: a missing K/N or a dropped bias term would fail it


def test_best_k_is_identified_only_when_separated():
    rng = np.random.default_rng(1)
    centre = np.zeros(DIM)
    far = {k: dataset(rng, k, 0.8, 1.5 if k != 8 else 6.0, centre, n_prompts=60) for k in (2, 4, 8)}
    records = {k: r for k, (r, _) in far.items()}
    batches = {k: b for k, (_, b) in far.items()}
    weights = bootstrap.prompt_weights(60, 400, 0)
    curve = measured_curve.measured_curve(records, batches, BUDGET, None, weights)
    assert curve.K == [2, 4, 8] and curve.K_best_point == 2
    assert curve.error_over_best["8"]["ci95"][0] > 1  # K = 8's noise is 16 times larger
    assert curve.identified is False and curve.K_best is None  # 2 and 4 are not separated at 60 prompts
    assert "not separated from K in [4]" in curve.message
    only = measured_curve.measured_curve(records, batches, BUDGET, [2, 8], weights)
    assert only.K == [2, 8] and only.identified and only.K_best == 2
    missing = {k: [dataclasses.replace(b, estimator_grams=None) for b in bs_] for k, bs_ in batches.items()}
    assert measured_curve.measured_curve(records, missing, BUDGET, None, weights).K == []
    assert "no decomposition" in measured_curve.describe(curve) and "K=8" in measured_curve.describe(curve)


def test_advisor_estimator_grpo_std_needs_its_traces():
    base = ["--oracle_table", "t.jsonl", "--save_json", "out", "--skip_plot", "--advisor_estimator", "grpo_std"]
    with pytest.raises(UsageError, match="add grpo_std to --estimators"):
        TracecovConfig.from_argv(base)
    config = TracecovConfig.from_argv([*base, "--estimators", "grpo", "oracleV", "grpo_std"])
    assert config.c1_copies == 3
    assert TracecovConfig.from_argv(base[:-2]).c1_copies == 1


def demo_oracle_table() -> str:
    """The committed demo's oracle table of the tiny policy (its name carries the run's timestamp)."""
    from conftest import ROOT

    (table,) = glob.glob(f"{ROOT}/results/demo/oracle_v_n256_tiny_policy_*[0-9].jsonl")
    return table


@pytest.mark.slow
def test_a_run_measures_std_grpo_at_each_k(tmp_path):
    """run_tracecov with --advisor_estimator grpo_std on the tiny policy: every c1 batch holds std-GRPO's Gram
    matrix (within_each = its traced tr Cov / M, prompt by prompt) and the bias' one; the advice names the
    estimator and carries the measured curve, which the printout shows."""
    from conftest import tracecov_argv

    from grpo_mse.analysis.advisor import describe
    from grpo_mse.runs.tracecov import TracecovRun

    table = demo_oracle_table()
    flags = dict(T=6, M=3, K_list=(2, 4), max_new_tokens=8, c1_batch=3, budget=64)
    extra = ["--estimators", "grpo", "oracleV", "grpo_std", "--advisor_estimator", "grpo_std"]
    config = TracecovConfig.from_argv(tracecov_argv(table, tmp_path, *extra, **flags))
    run = TracecovRun.start(config)
    records_by_k = run.sweep()
    batches_by_k = run.advisor.batches_by_k()
    result = run.write_outputs(records_by_k).result
    run.close()
    for k, batches in batches_by_k.items():
        traces = {r.prompt_index: r.tr_cov[GRPO_STD] for r in records_by_k[k]}
        assert len(batches) == 2
        for batch in batches:
            grams = batch.estimator_grams
            assert set(grams) == {GRPO_STD, measured_curve.BIAS_GRAM}
            expected = [traces[i] / M_RUN for i in batch.prompt_indices]
            assert np.allclose(grams[GRPO_STD]["within_each"], expected)
            assert np.asarray(grams[measured_curve.BIAS_GRAM]["gram"]).shape == (3, 3)
    advice = result["group_size_advisor"]
    assert advice["estimator"] == GRPO_STD and advice["measured_curve"]["K"] == [2, 4]
    assert "std-normalised GRPO, the run's estimator" in describe(advice)


M_RUN = 3


@pytest.mark.slow
def test_a_resumed_run_adds_the_std_grams_its_batches_lack(tmp_path):
    """An interrupted run without the std advisor, resumed with --advisor_estimator grpo_std: the batches saved
    without std-GRPO's Gram matrices are evaluated again (the same records) and gain them."""
    from conftest import tracecov_argv

    from grpo_mse.runs.tracecov import TracecovRun

    table = demo_oracle_table()
    flags = dict(T=4, M=2, K_list=(2,), max_new_tokens=6, c1_batch=4, budget=64)
    extra = ["--estimators", "grpo", "oracleV", "grpo_std"]
    first = TracecovRun.start(TracecovConfig.from_argv(tracecov_argv(table, tmp_path, *extra, **flags)))
    records_before = first.sweep()
    batches_before = first.advisor.batches_by_k()
    first.lock.close()  # "interrupted": the progress log stays, no outputs
    assert batches_before[2][0].estimator_grams is None
    resumed_argv = tracecov_argv(table, tmp_path, *extra, "--advisor_estimator", "grpo_std", "--resume", **flags)
    second = TracecovRun.start(TracecovConfig.from_argv(resumed_argv))
    records_after = second.sweep()
    batches_after = second.advisor.batches_by_k()
    second.close()
    assert set(batches_after[2][0].estimator_grams) == {GRPO_STD, measured_curve.BIAS_GRAM}
    assert batches_after[2][0].gram == batches_before[2][0].gram  # the same samples, the same oracle Gram

    def by_prompt(records):
        return sorted(records, key=lambda r: r.prompt_index)

    assert by_prompt(records_after[2]) == by_prompt(records_before[2])


def test_a_negative_smallest_error_identifies_no_k():
    """The squared bias is estimated without bias, so an error can come out below 0: then no K is named."""

    def batch(k, off_diagonal):
        gram = [[1.0, off_diagonal], [off_diagonal, 1.0]]
        zero = {"gram": [[0.0, 0.0], [0.0, 0.0]], "within_each": [0.0, 0.0]}
        grams = {GRPO_STD: zero, measured_curve.BIAS_GRAM: {"gram": gram, "within_each": [0.0, 0.0]}}
        return simulated_batch(k, [0, 1], zero["gram"], zero["within_each"], grams)

    records = {k: [simulated_prompt(k, i, {GRPO_STD: 0.0}) for i in (0, 1)] for k in (2, 4)}
    batches = {2: [batch(2, -1.0)], 4: [batch(4, 0.5)]}
    curve = measured_curve.measured_curve(records, batches, BUDGET, None, bootstrap.prompt_weights(2, 50, 0))
    assert curve.per_K["2"]["error"]["estimate"] == pytest.approx(-1.0)  # the pair mean <d_0, d_1>
    assert curve.per_K["4"]["error"]["estimate"] == pytest.approx(0.5)
    assert curve.K_best_point == 2 and curve.K_best is None and not curve.identified
    assert "not positive" in curve.message
    assert json.loads(json.dumps(curve.to_json()))["identified"] is False  # plain JSON types
