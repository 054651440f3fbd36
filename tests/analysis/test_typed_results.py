"""The typed results of grpo_mse.analysis and their readers: each record's ``to_json`` read back by its reader gives
an equal record, and every committed file of its kind under results/ (old shapes included) reads and is written
back key for key, in the saved order."""

import glob
import json
import os

import numpy as np
import pytest
from conftest import ROOT

from grpo_mse.analysis import bootstrap, error_model
from grpo_mse.analysis.advisor import GroupSizeAdvice, advise
from grpo_mse.analysis.bootstrap import read_calibration
from grpo_mse.analysis.measured_curve import MeasuredCurve
from grpo_mse.analysis.paired import PairedSummary, RunStatistics
from studies.advisor import heavy_tails
from studies.advisor import k_validation as kv
from studies.advisor.simulated_records import simulated_batch, simulated_prompt
from studies.audits import run_agreement
from studies.exact import one_token, theory
from studies.simulation import summary as simulation

RESULTS = os.path.join(ROOT, "results")


def committed(pattern: str) -> list[str]:
    return sorted(glob.glob(os.path.join(RESULTS, pattern), recursive=True))


def saved_advice() -> list[tuple[str, dict]]:
    """(path, group_size_advisor) of every committed run_tracecov JSON that has advice."""
    found = []
    for path in committed("**/tracecov_*.json"):
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if isinstance(data, dict) and "group_size_advisor" in data:
            found.append((os.path.relpath(path, ROOT), data["group_size_advisor"]))
    return found


ADVICE = saved_advice()


def same_json(record, data: dict) -> bool:
    """The record writes exactly ``data``: the same keys in the same order, the same values."""
    return json.dumps(record.to_json()) == json.dumps(data)


def simulated_run():
    """Records and c1 batches of 12 simulated prompts at K = 2 and 4 (traces grow with V(1 - V))."""
    rng = np.random.default_rng(3)
    records, batches = {}, {}
    for k in (2, 4):
        values = rng.uniform(0.1, 0.9, size=12)
        records[k] = [
            simulated_prompt(k, i, {"grpo": 5 * v * (1 - v) / (k - 1) + rng.gamma(2), "oracleV": v}, V_oracle=v)
            for i, v in enumerate(values)
        ]
        gram = rng.normal(size=(12, 3)) @ rng.normal(size=(3, 12))
        gram = (gram @ gram.T / 12).tolist()
        batches[k] = [simulated_batch(k, list(range(12)), gram, [0.1] * 12)]
    return records, batches


def test_advice_round_trip():
    records, batches = simulated_run()
    advice = advise(records, batches, n_boot=50, seed=0, budget=64, calibration=read_calibration())
    assert isinstance(advice.recommendation, error_model.Recommendation)
    again = GroupSizeAdvice.from_json(json.loads(json.dumps(advice.to_json())))
    assert again == advice and same_json(again, advice.to_json())


def test_every_committed_advice_shape_reads():
    assert len(ADVICE) >= 40  # six shapes: the first advice, then recommendation, coverage, clipping, estimator, curve
    shapes = set()
    for path, data in ADVICE:
        advice = GroupSizeAdvice.from_json(data, path)
        assert same_json(advice, data), path
        shapes.add(tuple(data))
        if "recommendation" in data:
            assert advice.recommendation.message == data["recommendation"]["message"]
        else:
            assert advice.recommendation is None and advice.ci95_method is None  # the first shape
    assert len(shapes) >= 6


def test_measured_curve_round_trip_and_committed_curves():
    empty = MeasuredCurve(estimator="grpo_std", K=[], message="no measured K divides the budget (or no std grams)")
    assert empty.to_json() == {"estimator": "grpo_std", "K": [], "message": empty.message}
    assert MeasuredCurve.from_json(empty.to_json()) == empty
    curves = [(path, data["measured_curve"]) for path, data in ADVICE if "measured_curve" in data]
    assert curves
    for path, data in curves:
        curve = MeasuredCurve.from_json(data, path)
        assert same_json(curve, data) and MeasuredCurve.from_json(curve.to_json()) == curve
        assert curve.K and curve.identified in (True, False)


def test_prediction_round_trip_and_both_saved_shapes():
    path, data = next((p, d) for p, d in ADVICE if "measured_curve" in d)
    pred = kv.predict({"group_size_advisor": data}, "s", written_at="2026-01-01T00:00:00Z")
    assert kv.Prediction.from_json(pred.to_json()) == pred
    assert pred.to_json()["measured_message"] == data["measured_curve"]["message"]
    files = committed("k_validation/**/prediction_*.json")
    assert files
    old = 0
    for name in files:
        with open(name, encoding="utf-8") as handle:
            saved = json.load(handle)
        found = kv.Prediction.from_json(saved, name)
        assert same_json(found, saved), name
        old += found.identified is None  # the first shape: no identified, message or estimator
        assert isinstance(kv.describe_prediction(found), str)
    assert 0 < old < len(files)


def test_sweep_summary_and_comparison_round_trip_and_committed_summary():
    with open(os.path.join(RESULTS, "k_validation", "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    for data in summary["settings"]:
        setting = kv.SettingSummary.from_json(data)
        assert isinstance(setting.sweep, kv.SweepSummary) and setting.sweep.best_K_bootstrap
        assert same_json(setting, data) and kv.SettingSummary.from_json(setting.to_json()) == setting
    for data in summary["comparisons"]:
        comparison = kv.Comparison.from_json(data)
        assert same_json(comparison, data) and kv.Comparison.from_json(comparison.to_json()) == comparison
    sweep = kv.SweepSummary(metric="m", per_K={"2": {"mean": 0.1}}, best_K=2, started_at="t", separated_pairs=[])
    assert "best_K_bootstrap" not in sweep.to_json() and kv.SweepSummary.from_json(sweep.to_json()) == sweep


def test_adaptive_summary_reads_committed_files():
    files = committed("k_validation/adaptive/summary_*.json")
    assert files
    for name in files:
        with open(name, encoding="utf-8") as handle:
            data = json.load(handle)
        summary = kv.AdaptiveSummary.from_json(data, name)
        assert isinstance(summary.adaptive, kv.Arm) and all(isinstance(a, kv.Arm) for a in summary.fixed.values())
        assert same_json(summary, data) and kv.AdaptiveSummary.from_json(summary.to_json()) == summary


def test_readers_name_what_a_file_lacks():
    with pytest.raises(Exception, match="Prediction lacks"):
        kv.Prediction.from_json({"name": "s"}, "p.json")


def test_theory_summary_reads_the_committed_theory_json():
    files = committed("theory/theory_*.json")
    assert files
    for name in files:
        with open(name, encoding="utf-8") as handle:
            data = json.load(handle)
        summary = one_token.TheorySummary.from_json(data, name)
        assert isinstance(summary.scaling_constants, theory.ScalingConstants)
        assert all(isinstance(p, one_token.PromptTheory) for p in summary.per_prompt)
        assert same_json(summary, data) and one_token.TheorySummary.from_json(summary.to_json()) == summary
    constants = theory.scaling_constants(np.eye(3), [1.0, 2.0, 3.0], [0.5, 0.5, 0.5])
    assert theory.ScalingConstants.from_json(constants.to_json()) == constants


def test_simulation_summary_reads_both_committed_shapes():
    files = committed("**/algorithm1_summary.json")
    assert files
    shapes = set()
    for name in files:
        with open(name, encoding="utf-8") as handle:
            data = json.load(handle)
        summary = simulation.SimulationSummary.from_json(data, name)
        assert summary.advisor is None or isinstance(summary.advisor, simulation.AdvisorReading)
        own = {key: value for key, value in data.items() if key not in simulation.COMMAND_KEYS}
        assert same_json(summary, own) and simulation.SimulationSummary.from_json(summary.to_json()) == summary
        shapes.add(summary.paired_differences is None)
    assert shapes == {True, False}


def test_coverage_cells_and_checks_read_every_committed_shape():
    cells = checks = 0
    for name in committed("coverage/**/*.json"):
        with open(name, encoding="utf-8") as handle:
            data = json.load(handle)
        for saved in data.get("cells", []):
            cell = heavy_tails.CoverageCell.from_json(saved, name)
            assert isinstance(cell.truth, heavy_tails.Truth) and same_json(cell, saved)
            cells += 1
        for saved in data.get("checks", []):
            found = heavy_tails.CoverageCheck.from_json(saved, name)
            assert same_json(found, saved) and heavy_tails.CoverageCheck.from_json(found.to_json()) == found
            checks += 1
    assert cells > 0 and checks > 0


def test_run_agreement_and_simulated_coverage_round_trip():
    a = {("grpo", 2, str(i)): float(i) for i in range(5)}
    b = {key: value + 0.1 * (-1) ** int(key[2]) for key, value in a.items()}
    for rtol in (None, 0.5):
        report = run_agreement.compare(a, b, rtol=rtol)
        assert run_agreement.Agreement.from_json(json.loads(json.dumps(report.to_json()))) == report
    found = bootstrap.simulated_coverage(1.0, 48, read_calibration())
    assert bootstrap.SimulatedCoverage.from_json(found.to_json()) == found


def test_paired_block_and_summaries_read_every_committed_run():
    runs = 0
    for path in committed("**/tracecov_*.json"):
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, dict) or "paired" not in data:
            continue
        paired = PairedSummary.from_json(data["paired"], path)
        assert same_json(paired, data["paired"]), path
        for series in paired.mean.values():
            for saved in series:
                summary = bootstrap.Summary.from_json(saved, path)
                assert same_json(summary, saved) and bootstrap.Summary.from_json(summary.to_json()) == summary
        if "group_size_advisor" in data:
            both = {"paired": data["paired"], "group_size_advisor": data["group_size_advisor"]}
            stats = RunStatistics(
                paired=paired, group_size_advisor=GroupSizeAdvice.from_json(both["group_size_advisor"])
            )
            assert same_json(stats, both)
        runs += 1
    assert runs >= 40
    weights = bootstrap.prompt_weights(6, 50, 0)
    values = np.arange(6.0)
    summary = bootstrap.studentized_summary(
        bootstrap.weighted_mean(weights, values),
        np.sqrt(
            bootstrap.influence_covariance(weights, bootstrap.mean_gradient(weights, values, weights @ values / 6))
        ),
        weights,
        log=True,
    )
    assert isinstance(summary.pieces, bootstrap.Pieces)
    assert bootstrap.Summary.from_json(json.loads(json.dumps(summary.to_json()))) == summary
