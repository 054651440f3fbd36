"""The small functions of ``analysis.paired`` that a run calls per prompt or prints with, against known answers
(found by mutation testing, issue 58: they were reached only through whole runs that did not check them)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap, paired


@pytest.mark.parametrize("n", [2, 5, 11])
def test_the_oracle_value_variance_is_unbiased_over_the_binomial_law(n):
    """E[V_hat (1 - V_hat) / (n - 1)] = Var(V_hat) = p (1 - p) / n when V_hat is the mean of n Bernoulli(p)
    rewards: the exact expectation over the binomial law, summed here."""
    p = 0.3
    expectation = sum(
        math.comb(n, j) * p**j * (1 - p) ** (n - j) * paired.oracle_value_variance(j / n, n) for j in range(n + 1)
    )
    assert expectation == pytest.approx(p * (1 - p) / n, rel=1e-12)
    assert paired.oracle_value_variance(0.3, float(n)) == paired.oracle_value_variance(0.3, n)  # 256.0 from a table


def test_the_oracle_value_variance_is_zero_for_an_exact_v_or_one_reward():
    for exact in (None, math.nan):  # null in the table (NaN through pandas)
        assert paired.oracle_value_variance(0.4, exact) == 0.0
    assert paired.oracle_value_variance(1.0, 1) == 0.0 and paired.oracle_value_variance(0.0, 1.0) == 0.0


@pytest.mark.parametrize(
    ("distribution", "top_p", "include_eos", "mismatch"),
    [
        ("model", 0.95, True, True),  # the model's score, samples from the nucleus
        ("model", 1.0, True, False),
        ("sampling", 0.95, True, False),  # the score of the law sampled from
        ("sampling", 1.0, False, True),  # EOS left out of the score
        ("model", 1.0, False, True),
    ],
)
def test_score_law_mismatch_truth_table(distribution, top_p, include_eos, mismatch):
    assert paired.score_law_mismatch(distribution, top_p, include_eos) is mismatch


def test_score_law_mismatch_keeps_eos_by_default():
    assert paired.score_law_mismatch("model", 1.0) is False and paired.score_law_mismatch("model", 0.9) is True


def test_vanilla_bias2_is_v_squared_times_the_score_norm():
    assert paired.vanilla_bias2(0.5, 0.2) == pytest.approx(0.25 * 0.2)
    assert paired.vanilla_bias2(1.0, 0.3) == pytest.approx(0.3)
    assert paired.vanilla_bias2(0.4, -0.1) == pytest.approx(-0.016)  # the unbiased ||E s||^2 can be below 0
    assert paired.vanilla_bias2(0.0, math.nan) == 0.0  # V = 0: the score is not measured, the bias is 0


def test_largest_share_over_the_finite_prompts():
    assert paired.largest_share(np.array([1.0, 3.0, np.nan])) == pytest.approx(0.75)
    assert paired.largest_share(np.array([0.1, 0.3])) == pytest.approx(0.75)  # a total below 1
    for undefined in ([], [np.nan], [-1.0, -2.0]):  # no prompt, or a sum of MSE estimates <= 0
        assert math.isnan(paired.largest_share(np.array(undefined)))


def test_band_ratio_is_nan_where_the_band_has_no_oracle_error():
    """A band whose prompts all have V = 1 and an exact V: the oracle's MSE there is 0 while vanilla's (its bias) is
    not; at V = 0 both are 0. The ratio is undefined (nan), not inf, and no numpy warning reaches the terminal."""
    weights = bootstrap.prompt_weights(4, 20, 0)
    top, bottom = np.array([2.0, 1.0, 0.5, 0.0]), np.array([1.0, 0.0, 4.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        undefined = [paired.band_ratio(weights, top, bottom, np.arange(4) == i) for i in (1, 3)]  # x/0 and 0/0
        first_two = paired.band_ratio(weights, top, bottom, np.array([True, True, False, False]))
    for ratio in undefined:
        assert ratio.dtype == np.float64 and np.isnan(ratio).all()
    w = weights[:, :2]
    with np.errstate(invalid="ignore", divide="ignore"):
        by_hand = (w @ top[:2] / w.sum(1)) / (w @ bottom[:2] / w.sum(1))
    by_hand[w[:, 0] == 0] = np.nan  # only the zero-error prompt drawn
    np.testing.assert_allclose(first_two, by_hand, rtol=1e-12)
    assert first_two[0] == pytest.approx(1.5 / 0.5)


def test_half_width_text():
    assert paired.half_width_text(0.01234) == "±0.012"
    for missing in (None, math.nan, math.inf):
        assert paired.half_width_text(missing) == " [n/a]"


def test_describe_prints_each_k_with_its_intervals_and_marks():
    saved = {
        "K_list": [2, 16],
        "ratio": {
            "naive/oracleV": [
                {"estimate": 3.14159, "ci95": [2.5, 4.0]},
                {"estimate": -0.5, "ci95": [0.0, 0.2], "clipped": True, "unreliable": bootstrap.UNRELIABLE},
            ]
        },
        "difference": {"naive-oracleV": [{"estimate": 1.0, "ci95": [-0.5, 2.0]}, {"estimate": 2.0, "ci95": None}]},
        "mean_score_sq": [{"estimate": 0.25, "ci95": [0.0, 0.5], "clipped": True}, {"estimate": None, "ci95": None}],
        "mean_score_sq_mean_over_K": {"estimate": 0.125, "ci95": [0.1, 0.2]},
    }
    assert paired.describe(saved).split("\n") == [
        "K=   2  naive/oracleV=3.14 [2.5, 4]  naive-oracleV=1 [-0.5, 2]  ||E s||^2=0.25 [0, 0.5] (clipped at 0)",
        "K=  16  naive/oracleV=-0.5 [0, 0.2] (unreliable: below 0)  naive-oracleV=2 [n/a]  ||E s||^2=- [n/a]",
        "||E s||^2 (prompts with 0<V<1, mean over K)=0.125 [0.1, 0.2]",
    ]
    bare = {key: saved[key] for key in ("K_list", "ratio", "difference")}
    assert paired.describe(bare) == "K=   2  naive/oracleV=3.14 [2.5, 4]  naive-oracleV=1 [-0.5, 2]\n" + (
        "K=  16  naive/oracleV=-0.5 [0, 0.2] (unreliable: below 0)  naive-oracleV=2 [n/a]"
    )
