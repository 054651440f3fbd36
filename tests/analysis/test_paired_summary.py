"""The paired block of a run (``paired.paired_summary``, ``run_statistics``) against numbers computed here by hand.

Six prompts at K = 2 and 4 (prompt 5 has no K = 4 record), vanilla biased (its bias^2 estimate below 0 at one
prompt), V_oracle on every band edge (0.25, 0.5, 0.75) and at 1, ||E s||^2 and the oracle noise with estimates either
side of 0, std-GRPO measured against its own target. Every estimate is the plain mean (or ratio of means) over the
prompts that have the number; every interval is the BCa (or studentized) interval of replicates that this file
computes from the bootstrap weights itself, clipped at 0 where the quantity is >= 0 (found by mutation testing,
issue 58: the tables were checked only for their shape).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap, paired
from grpo_mse.gradients import estimators as est
from studies.advisor.simulated_records import simulated_prompt

K_LIST = (2, 4)
NAMES = (est.VANILLA, est.GRPO, est.ORACLE, est.GRPO_STD)
VALUES = np.array([0.25, 0.5, 0.75, 1.0, 0.1, 0.6])  # band edges, V = 1, and one prompt inside bands 1 and 3
BANDS_BY_HAND = [[4], [0], [1, 5], [2, 3]]  # prompts per band: [0, .25), [.25, .5), [.5, .75), [.75, 1]
N_BOOT = 300
MISSING = (4, 5)  # (K, prompt) without a record


def _numbers():
    """{K: {field: [6] array}} of the per-prompt numbers, nan where a prompt has no record."""
    rng = np.random.default_rng(11)
    out = {}
    for k in K_LIST:
        tr = {n: rng.uniform(0.5, 3.0, 6) * (1 + 2 * (n == est.VANILLA)) for n in NAMES}
        numbers = {f"tr_{n}": v for n, v in tr.items()}
        numbers["bias2"] = rng.uniform(0.0, 2.0, 6)
        numbers["bias2"][1] = -4.0  # an unbiased bias^2 estimate below 0
        numbers["score_sq"] = rng.normal(0.0, 1.0, 6)  # means near 0: intervals reach below 0
        numbers["score_sq"][3] = np.nan  # V = 1: not measured
        numbers["noise"] = rng.normal(0.05, 0.2, 6)
        numbers["bias2_own"] = rng.uniform(0.0, 1.0, 6)
        for values in numbers.values():
            values[5] = np.nan if k == MISSING[0] else values[5]
        out[k] = numbers
    return out


NUMBERS = _numbers()


def _mse(k: int, name: str) -> np.ndarray:
    numbers = NUMBERS[k]
    return numbers[f"tr_{name}"] + (numbers["bias2"] if name == est.VANILLA else 0.0)


def _records() -> dict:
    records = {}
    for k in K_LIST:
        numbers, rows = NUMBERS[k], []
        for i in range(6):
            if (k, i) == MISSING:
                continue
            tr_cov = {n: float(numbers[f"tr_{n}"][i]) for n in NAMES}
            own = float(numbers["bias2_own"][i])
            rows.append(
                simulated_prompt(
                    k,
                    i,
                    tr_cov,
                    float(VALUES[i]),
                    bias2={est.VANILLA: float(numbers["bias2"][i])},
                    mse={n: float(_mse(k, n)[i]) for n in NAMES},
                    mean_score_sq=None if np.isnan(numbers["score_sq"][i]) else float(numbers["score_sq"][i]),
                    oracle_noise=float(numbers["noise"][i]),
                    bias2_own={est.GRPO_STD: own},
                    mse_own={est.GRPO_STD: tr_cov[est.GRPO_STD] + own},
                )
            )
        records[k] = rows[::-1]  # out of prompt order: each number must land in its prompt's column
    return records


WEIGHTS = bootstrap.prompt_weights(6, N_BOOT, seed=3)


def _draws(values: np.ndarray, mask=None) -> np.ndarray:
    """[R] replicates of the mean over the prompts in ``mask`` with a number (nan where none is drawn)."""
    keep = np.isfinite(values) & (True if mask is None else np.isin(np.arange(6), mask))
    mass = WEIGHTS[:, keep].sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return WEIGHTS[:, keep] @ values[keep] / mass


def _same(saved: dict, expected: bootstrap.Summary):
    """The saved summary is ``expected`` (numbers to 1e-12: the replicates are summed here in another order)."""
    wanted = expected.to_json()
    assert set(saved) == set(wanted), (saved, wanted)
    for key, value in wanted.items():
        if key in ("estimate", "ci95") and value is not None:
            assert saved[key] == pytest.approx(value, rel=1e-12, abs=1e-12), (key, saved, wanted)
        else:
            assert saved[key] == value, (key, saved, wanted)


def _clipped(draws: np.ndarray) -> bootstrap.Summary:
    return bootstrap.at_least_zero(bootstrap.summarise(draws, WEIGHTS))


# Per test, not per module: mutmut runs a mutant against the tests that called its function, and a module fixture
# calls it within the first test only (4 s for the file either way).
@pytest.fixture
def summary() -> dict:
    return paired.paired_summary(_records(), list(K_LIST), list(NAMES), WEIGHTS).to_json()


def test_means_differences_and_largest_shares_are_those_of_the_prompts(summary):
    assert summary["K_list"] == list(K_LIST) and summary["n_boot"] == N_BOOT
    assert "BCa 95% interval" in summary["note"] and "studentized" in summary["note"]  # how the intervals are made
    for i, k in enumerate(K_LIST):
        oracle = _mse(k, est.ORACLE)
        for n in NAMES:
            mse = _mse(k, n)
            assert summary["mean"][n][i]["estimate"] == pytest.approx(np.nanmean(mse))
            _same(summary["mean"][n][i], _clipped(_draws(mse)))
            finite = mse[np.isfinite(mse)]
            assert summary["largest_prompt_share"][n][i] == pytest.approx(finite.max() / finite.sum())
            if n != est.ORACLE:
                difference = summary["difference"][f"{n}-{est.ORACLE}"][i]
                assert difference["estimate"] == pytest.approx(np.nanmean(mse) - np.nanmean(oracle))
                _same(difference, bootstrap.summarise(_draws(mse) - _draws(oracle), WEIGHTS))
    assert set(summary["difference"]) == {f"{n}-{est.ORACLE}" for n in NAMES if n != est.ORACLE}


def test_ratios_to_the_oracle_and_vanilla_over_grpo_are_ratios_of_mean_mses(summary):
    pairs = [(n, est.ORACLE) for n in NAMES if n != est.ORACLE] + [(est.VANILLA, est.GRPO)]
    assert set(summary["ratio"]) == {f"{a}/{b}" for a, b in pairs}
    for i, k in enumerate(K_LIST):
        for a, b in pairs:
            top, bottom = _mse(k, a), _mse(k, b)
            saved = summary["ratio"][f"{a}/{b}"][i]
            assert saved["estimate"] == pytest.approx(np.nanmean(top) / np.nanmean(bottom))
            assert saved["interval"] == "studentized" and saved["n_undefined"] == 0
            _same(saved, bootstrap.at_least_zero(bootstrap.ratio_summary(WEIGHTS, top, bottom)[0]))


def test_a_biased_estimator_also_gets_its_trace_alone(summary):
    assert set(summary["trace_mean"]) == {est.VANILLA} and set(summary["trace_ratio"]) == {"naive/oracleV"}
    for i, k in enumerate(K_LIST):
        trace, oracle = NUMBERS[k][f"tr_{est.VANILLA}"], NUMBERS[k][f"tr_{est.ORACLE}"]
        assert summary["trace_mean"][est.VANILLA][i]["estimate"] == pytest.approx(np.nanmean(trace))
        assert summary["trace_ratio"]["naive/oracleV"][i]["estimate"] == pytest.approx(
            np.nanmean(trace) / np.nanmean(oracle)
        )
        _same(summary["trace_mean"][est.VANILLA][i], _clipped(_draws(trace)))
        _same(summary["trace_ratio"]["naive/oracleV"][i], _clipped(_draws(trace) / _draws(oracle)))


def test_trace_means_below_zero_by_rounding_are_clipped_and_marked():
    """The fast engine's tr Cov is a difference of Gram sums: where the gradients barely differ it can come out a
    rounding error below 0. The mean trace and its ratio to the oracle's are >= 0 quantities, clipped like the MSEs."""
    traces = [-3e-16, 1e-16, -2e-16, 0.0]
    records = {
        k: [
            simulated_prompt(k, i, {est.VANILLA: t, est.ORACLE: 1.0}, 0.5, bias2={est.VANILLA: 1.0})
            for i, t in enumerate(traces)
        ]
        for k in K_LIST
    }
    out = paired.run_statistics(records, list(K_LIST), [est.VANILLA, est.ORACLE], n_boot=100).paired.to_json()
    for saved in (out["trace_mean"][est.VANILLA][0], out["trace_ratio"]["naive/oracleV"][0]):
        assert saved["estimate"] == pytest.approx(np.mean(traces), abs=1e-30)
        assert saved["ci95"][0] == 0.0 and saved["clipped"] and saved["unreliable"] == bootstrap.UNRELIABLE


def test_what_a_run_measures_decides_the_tables():
    """Vanilla and GRPO without the oracle still get their paired ratio; ||E s||^2 without the oracle noise (records
    that do not hold it) gives no relative oracle noise."""
    records = {2: [simulated_prompt(2, i, {n: 1.0 + i + (n == est.VANILLA) for n in NAMES}, 0.5) for i in range(3)]}
    two = paired.run_statistics(records, [2], [est.VANILLA, est.GRPO], n_boot=30).paired.to_json()
    assert set(two["ratio"]) == {"naive/grpo"} and two["difference"] == {}
    assert two["ratio"]["naive/grpo"][0]["estimate"] == pytest.approx((2 + 3 + 4) / (1 + 2 + 3))
    records = {
        k: [simulated_prompt(k, i, {n: 1.0 for n in NAMES}, 0.5, mean_score_sq=0.1 * i) for i in range(3)]
        for k in K_LIST
    }
    out = paired.run_statistics(records, list(K_LIST), list(NAMES), n_boot=30).paired.to_json()
    assert "mean_score_sq" in out and "oracle_noise" not in out and "oracle_noise_relative" not in out


def test_band_counts_and_ratios_follow_the_band_edges(summary):
    bands = summary["ratio_by_V_band"]
    assert set(bands) == {"bands", "n_prompts", "ratio"}
    assert bands["bands"] == [list(b) for b in paired.V_BANDS]
    present = {k: [p for p in range(6) if (k, p) != MISSING] for k in K_LIST}
    assert bands["n_prompts"] == [[len(set(b) & set(present[k])) for b in BANDS_BY_HAND] for k in K_LIST]
    assert bands["n_prompts"] == [[1, 1, 2, 2], [1, 1, 1, 2]]
    assert set(bands["ratio"]) == {f"{n}/{est.ORACLE}" for n in NAMES if n != est.ORACLE}
    for name, per_k in bands["ratio"].items():
        for i, k in enumerate(K_LIST):
            top, bottom = _mse(k, name.split("/")[0]), _mse(k, est.ORACLE)
            for members, saved in zip(BANDS_BY_HAND, per_k[i]):
                inside = [p for p in members if (k, p) != MISSING]
                assert saved["estimate"] == pytest.approx(top[inside].mean() / bottom[inside].mean())
                _same(saved, _clipped(_draws(top, members) / _draws(bottom, members)))


def test_score_norm_and_oracle_noise_per_k_and_over_k(summary):
    for key, field in (("mean_score_sq", "score_sq"), ("oracle_noise", "noise")):
        per_k = [_draws(NUMBERS[k][field]) for k in K_LIST]
        for i, k in enumerate(K_LIST):
            assert summary[key][i]["estimate"] == pytest.approx(np.nanmean(NUMBERS[k][field]))
            _same(summary[key][i], _clipped(per_k[i]))
        _same(summary[f"{key}_mean_over_K"], _clipped((per_k[0] + per_k[1]) / 2))
    assert any(s.get("clipped") for s in summary["mean_score_sq"])  # the data reach below 0: clipping is tested
    assert any(s.get("clipped") for s in summary["oracle_noise"])
    for i, k in enumerate(K_LIST):  # relative to the oracle's mean MSE, not clipped
        relative = _draws(NUMBERS[k]["noise"]) / _draws(_mse(k, est.ORACLE))
        _same(summary["oracle_noise_relative"][i], bootstrap.summarise(relative, WEIGHTS))


def test_std_grpo_against_its_own_target(summary):
    own = summary["grpo_std_own_target"]
    assert own["n_prompts"] == [6, 5] and own["note"] == est.get(est.GRPO_STD).own_target.note
    for i, k in enumerate(K_LIST):
        bias2, trace = NUMBERS[k]["bias2_own"], NUMBERS[k][f"tr_{est.GRPO_STD}"]
        assert own["bias2"][i]["estimate"] == pytest.approx(np.nanmean(bias2))
        _same(own["bias2"][i], bootstrap.summarise(_draws(bias2), WEIGHTS))
        _same(own["mse"][i], bootstrap.summarise(_draws(trace + bias2), WEIGHTS))


def test_run_statistics_draws_2000_replicates_from_seed_0_by_default():
    records = _records()
    out = paired.run_statistics(records, list(K_LIST), list(NAMES)).paired
    weights = bootstrap.prompt_weights(6, 2000, 0)
    assert out.n_boot == 2000
    assert out.to_json() == paired.paired_summary(records, list(K_LIST), list(NAMES), weights).to_json()
    seeded = paired.run_statistics(records, list(K_LIST), list(NAMES), seed=3, n_boot=N_BOOT).paired
    assert seeded.to_json() == paired.paired_summary(records, list(K_LIST), list(NAMES), WEIGHTS).to_json()


def test_the_advisor_gets_the_same_replicates_and_needs_two_prompts(capsys):
    """``advice`` is called with the very weights behind the paired block; with one prompt it is skipped with a note
    on stderr, with two it runs, and without it nothing is said."""
    seen = []

    def advice(weights):
        seen.append(weights)
        return "advice"

    records = _records()
    two = {k: [r for r in rows if r.prompt_index < 2] for k, rows in records.items()}
    one = {k: [r for r in rows if r.prompt_index == 0] for k, rows in records.items()}
    out = paired.run_statistics(two, list(K_LIST), list(NAMES), seed=2, n_boot=40, advice=advice)
    assert out.group_size_advisor == "advice" and len(seen) == 1
    assert np.array_equal(seen[0], bootstrap.prompt_weights(2, 40, 2))
    assert capsys.readouterr().err == ""
    assert paired.run_statistics(one, list(K_LIST), list(NAMES), n_boot=40, advice=advice).group_size_advisor is None
    assert "needs 2 or more prompts" in capsys.readouterr().err and len(seen) == 1
    assert paired.run_statistics(one, list(K_LIST), list(NAMES), n_boot=40).group_size_advisor is None
    assert capsys.readouterr().err == ""


def test_zero_oracle_errors_give_undefined_ratios_without_warnings():
    """Prompts 0, 1 with V = 0 (an answer never given): every estimator's MSE is 0. Prompts 2, 3 with an exact V = 1:
    the oracle's and GRPO's are 0, vanilla's trace is not. So GRPO over the oracle is 0/0 in every replicate
    (undefined: None, each replicate counted), vanilla's trace over the oracle's is x/0 or 0/0, and numpy's
    division warnings stay out of the user's terminal."""

    def record(k, i):
        vanilla = 0.0 if i < 2 else 1.0
        tr_cov = {n: vanilla if n == est.VANILLA else 0.0 for n in NAMES}
        bias2 = {est.VANILLA: 0.0 if i < 2 else 0.5}
        mse = {**tr_cov, est.VANILLA: vanilla + bias2[est.VANILLA]}
        return simulated_prompt(k, i, tr_cov, float(i >= 2), bias2=bias2, mse=mse, oracle_noise=0.0)

    records = {k: [record(k, i) for i in range(4)] for k in K_LIST}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = paired.run_statistics(records, list(K_LIST), list(NAMES), n_boot=50).paired.to_json()
    for series in (out["ratio"][f"{est.GRPO}/{est.ORACLE}"], out["oracle_noise_relative"]):
        assert all(s.get("estimate") is None and s["n_undefined"] == 50 for s in series), series
    assert all(s["estimate"] == 0.0 for s in out["mean"][est.GRPO])
    assert [s["estimate"] for s in out["mean"][est.VANILLA]] == [0.75, 0.75]
