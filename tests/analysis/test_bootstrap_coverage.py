"""Coverage of the joint prompt bootstrap by simulation on an exact case.

A population of 30 prompt types (3 outcomes, explicit 4-d scores centred under p, one rewarded outcome) has
exact per-K MSEs (theory.closed_form_mse) and exact c1, c3 (theory.scaling_constants over the population).
Each of 200 simulated runs draws T prompts uniformly (with replacement), samples M groups of K per prompt,
forms the per-prompt traces and c1 batches exactly as run_tracecov records them, and calls
paired.run_statistics. The 95% intervals must cover the true values in 95% of runs, within 3 binomial standard
errors (the advisor's c1, c3, K*: its plain bootstrap-t intervals; the ones it prints, widened for heavy tails,
at least as often). (With T = 48 prompts the same simulation covers the ratios 90-93% of the time: the bootstrap is a
large-T approximation; docs/statistics.md.)
"""

from functools import partial

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap, paired
from grpo_mse.analysis.advisor import run_advice
from grpo_mse.analysis.bootstrap import read_calibration
from grpo_mse.tables.records import C1BatchRecord
from studies.advisor import heavy_tails
from studies.advisor.simulated_records import simulated_prompt
from studies.exact import theory

HEAVY_TAILS = heavy_tails  # the same simulated traces as the heavy-tail study

TYPES, OUTCOMES, DIM, T, M, K_LIST, BATCH, RUNS, N_BOOT = 30, 3, 4, 256, 8, (2, 4), 16, 200, 200
assert (HEAVY_TAILS.TYPES, HEAVY_TAILS.OUTCOMES, HEAVY_TAILS.DIM, HEAVY_TAILS.M) == (TYPES, OUTCOMES, DIM, M)


def _truth(types) -> dict:
    moments = [theory.exact_moments(p, G, s @ s.T) for p, G, s in types]
    consts = theory.scaling_constants(
        theory.gradient_gram([(p * G) @ s for p, G, s in types]),
        [m.sigma_o2 for m in moments],
        [m.var_zeta2 for m in moments],
    )
    truth = {"c1": consts.c1, "c3": consts.c3, "K_star_exact": consts.K_star_exact}
    truth.update({f"wide:{name}": value for name, value in list(truth.items())})
    for k in K_LIST:
        mse = {n: np.mean([theory.closed_form_mse(m, k, n) for m in moments]) for n in ("naive", "grpo", "oracleV")}
        truth[f"grpo/oracleV@{k}"] = mse["grpo"] / mse["oracleV"]
        truth[f"naive/oracleV@{k}"] = mse["naive"] / mse["oracleV"]
    return truth


def _simulated_run(rng, types):
    """One run's records and c1 batches (BetweenPromptBatch's fields, from the mean vectors' Gram matrices)."""
    chosen = rng.integers(0, TYPES, T)
    records, batches = {}, {}
    for k in K_LIST:
        traces, means = HEAVY_TAILS.traces(rng, types, chosen, np.ones(len(chosen)), k)  # unit score scales
        records[k] = [simulated_prompt(k, i, {n: float(v[i]) for n, v in traces.items()}) for i in range(T)]
        batches[k] = []
        for start in range(0, T, BATCH):
            index = list(range(start, start + BATCH))
            gram = means[index] @ means[index].T
            within = (traces["oracleV"][index] / M).tolist()
            between = (np.trace(gram) - gram.sum() / BATCH) / (BATCH - 1)
            spread = (between, np.mean(within), between - np.mean(within))
            batches[k].append(C1BatchRecord(0, k, BATCH, index, gram.tolist(), within, *spread))
    advice = partial(
        run_advice, records, batches, budget=64, allowed=None, estimator="grpo", calibration=read_calibration()
    )
    seed = int(rng.integers(1 << 30))
    return paired.run_statistics(records, list(K_LIST), ["naive", "grpo", "oracleV"], seed, N_BOOT, advice).to_json()


def _unwidened(pieces: dict, name: str) -> list[float]:
    """The plain bootstrap-t interval from the advisor's ``studentized`` pieces (K*: 1 + 1/sqrt(q), ends swapped)."""
    low, high = bootstrap.pieces_interval(bootstrap.Pieces.from_json(pieces))
    if name != "K_star_exact":
        return [low, high]
    return [1 + high**-0.5 if high > 0 else np.inf, 1 + low**-0.5 if low > 0 else np.inf]


def _intervals(out) -> dict:
    """The ratio intervals, the advisor's plain bootstrap-t intervals of c1, c3, K* and (``wide:``) the widened
    ones it prints."""
    advice, ratios = out["group_size_advisor"], out["paired"]["ratio"]
    found = {name: _unwidened(advice["studentized"][name], name) for name in ("c1", "c3", "K_star_exact")}
    found.update({f"wide:{name}": advice["ci95"][name] for name in ("c1", "c3", "K_star_exact")})
    for i, k in enumerate(K_LIST):
        for name in ("grpo/oracleV", "naive/oracleV"):
            found[f"{name}@{k}"] = ratios[name][i]["ci95"]
    return found


@pytest.mark.slow
def test_joint_bootstrap_intervals_cover_at_95_percent():
    rng = np.random.default_rng(2026)
    types = HEAVY_TAILS.population(rng)
    truth = _truth(types)
    assert truth["c1"] > 0 and truth["c3"] > 0
    hits = {name: 0 for name in truth}
    for _ in range(RUNS):
        for name, interval in _intervals(_simulated_run(rng, types)).items():
            hits[name] += interval is not None and interval[0] <= truth[name] <= interval[1]
    coverage = {name: count / RUNS for name, count in hits.items()}
    tolerance = 3 * np.sqrt(0.95 * 0.05 / RUNS)  # 3 binomial standard errors: 0.046
    print(coverage)
    plain = {name: value for name, value in coverage.items() if not name.startswith("wide:")}
    for name, value in plain.items():
        assert abs(value - 0.95) <= tolerance, f"{name}: coverage {value:.3f} (truth {truth[name]:.4g})"
    assert np.mean(list(plain.values())) == pytest.approx(0.95, abs=0.03)
    for name in ("c1", "c3", "K_star_exact"):  # widened for heavy tails: at least as often on this light tail
        assert coverage[f"wide:{name}"] >= max(plain[name], 0.95 - tolerance), name


def test_interval_always_contains_its_estimate():
    """A statistic whose replicates all fall on one side of the estimate (here: replicate = estimate + 1 + noise)
    still gets an interval that contains the estimate; the plain BCa quantiles alone would exclude it."""
    from grpo_mse.analysis import bootstrap

    weights = bootstrap.prompt_weights(20, 400, seed=1)
    n_boot = bootstrap.n_boot_of(weights)
    rng = np.random.default_rng(0)
    draws = np.concatenate([[5.0], 6.0 + rng.random(n_boot), 5.0 + rng.random(20) * 1e-3])
    low, high = bootstrap.interval(draws, weights)
    assert low <= 5.0 <= high
    assert high > 6.5  # the upper end still comes from the replicates


def test_advisor_flags_k_star_below_two():
    from grpo_mse.analysis import advisor

    def advice(k_star):  # identified constants (intervals clear of 0) whose K* = 1 + sqrt(c3/c1) is k_star
        c3 = (k_star - 1) ** 2
        pooled = {"c1": 1.0, "c2": 1.0, "c3": c3, "K_star_exact": k_star, "K_star_paper": k_star - 1, "K_best": 2.0}
        return {
            "pooled": pooled,
            "ci95": {"c1": [0.5, 2.0], "c3": [c3 / 2, c3 * 2]},
            "degenerate_replicates": {"n_boot": 10, "c1<=0": 0, "c3<=0": 0},
            "allowed_K": [2, 4],
            "budget": 64,
        }

    assert "use the smallest allowed K" in advisor.describe(advice(1.5))
    assert "use the smallest allowed K" not in advisor.describe(advice(3.0))
