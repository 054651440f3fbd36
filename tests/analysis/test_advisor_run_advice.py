"""run_advice, the advice run_tracecov saves: advise with the run's own bootstrap weights and allowed K, tagged
with the estimator it is for, and for std-GRPO also its measured curve at the run's budget. The curve's error at
each K is checked against the formula computed here from the generated means (K/N (c1 + mean trace) + mean
within-batch <d_i, d_j>), the weights by their number of replicates, the allowed K by the K reported."""

import numpy as np
import pytest

from grpo_mse.analysis.advisor import run_advice
from grpo_mse.analysis.bootstrap import prompt_weights, read_calibration
from grpo_mse.analysis.error_model import BIAS_GRAM
from grpo_mse.gradients.estimators import GRPO, GRPO_STD, ORACLE
from studies.advisor.simulated_records import simulated_batch, simulated_prompt

DIM, M, PROMPTS, BATCH, BUDGET, N_BOOT, KS = 3, 4, 12, 4, 64, 40, (2, 4, 8)


def _pairs_mean(vectors: np.ndarray) -> float:
    """The mean over within-batch pairs i != j of <v_i, v_j> (every batch has BATCH prompts)."""
    sums = []
    for start in range(0, PROMPTS, BATCH):
        block = vectors[start : start + BATCH]
        gram = block @ block.T
        sums.append((gram.sum() - np.trace(gram)) / (BATCH * (BATCH - 1)))
    return float(np.mean(sums))


def _entry(means: np.ndarray, traces: np.ndarray, members: list[int]) -> dict:
    return {"gram": (means[members] @ means[members].T).tolist(), "within_each": list(traces[members] / M)}


@pytest.fixture(scope="module")
def run():
    """Records and c1 batches of three K (the same 12 prompts), each with std-GRPO's and its bias's Gram matrices,
    and the data-row error of std-GRPO at each K computed from the generated vectors."""
    rng = np.random.default_rng(5)
    records, batches, truth = {}, {}, {}
    for k in KS:
        oracle, grpo = rng.uniform(1.0, 2.0, PROMPTS), rng.uniform(2.5, 4.0, PROMPTS)
        x = rng.normal(1.0, 0.8 * k, size=(PROMPTS, DIM))  # std-GRPO's mean gradients: spread growing with K
        x_trace = rng.uniform(0.5, 1.5, PROMPTS) * k
        d = rng.normal(0.3, 0.5, size=(PROMPTS, DIM))  # its differences from its own target
        d_trace = rng.uniform(0.1, 0.3, PROMPTS)
        g = rng.normal(0.5, 1.0, size=(PROMPTS, DIM))  # the oracle's mean gradients
        records[k] = [
            simulated_prompt(k, i, {ORACLE: oracle[i], GRPO: grpo[i], GRPO_STD: float(x_trace[i])})
            for i in range(PROMPTS)
        ]
        batches[k] = []
        for start in range(0, PROMPTS, BATCH):
            members = list(range(start, start + BATCH))
            own = _entry(g, oracle, members)
            grams = {GRPO_STD: _entry(x, x_trace, members), BIAS_GRAM: _entry(d, d_trace, members)}
            batches[k].append(simulated_batch(k, members, own["gram"], own["within_each"], grams))
        c1 = float(np.mean((x**2).sum(1) - x_trace / M)) - _pairs_mean(x)
        truth[k] = k / BUDGET * (c1 + float(x_trace.mean())) + _pairs_mean(d)
    return records, batches, truth


def _advice(run, estimator: str, allowed):
    records, batches, _ = run
    weights = prompt_weights(PROMPTS, N_BOOT, seed=3)
    return run_advice(
        records, batches, weights, budget=BUDGET, allowed=allowed, estimator=estimator, calibration=read_calibration()
    )


def test_advice_for_grpo_uses_the_runs_weights_and_allowed_k_and_has_no_curve(run):
    advice = _advice(run, GRPO, [4, 8])
    assert advice.estimator == GRPO
    assert advice.measured_curve is None  # the measured curve is std-GRPO's alone
    assert advice.allowed_K == [4, 8]  # not every power of two dividing 64
    assert advice.degenerate_replicates["n_boot"] == N_BOOT  # the run's weights, not advise's own 2000
    assert advice.budget == BUDGET


def test_advice_for_grpo_std_holds_its_measured_curve_at_the_budget(run):
    _, _, truth = run
    advice = _advice(run, GRPO_STD, [2, 8])
    assert advice.estimator == GRPO_STD
    assert advice.allowed_K == [2, 8] and advice.degenerate_replicates["n_boot"] == N_BOOT
    curve = advice.measured_curve
    assert curve is not None and curve.estimator == GRPO_STD
    assert curve.K == [2, 8]  # the allowed K only (K = 4 is measured too)
    for k in curve.K:
        assert curve.per_K[str(k)]["error"]["estimate"] == pytest.approx(truth[k], rel=1e-9)
    # The bootstrap replicates are the run's N_BOOT: each K's share of them is a whole number of replicates.
    shares = np.array(list(curve.K_best_frequency.values()))
    assert shares.sum() == pytest.approx(1.0) and np.allclose(shares * N_BOOT, np.round(shares * N_BOOT))
