"""The best K of std-GRPO's measured curve (grpo_mse.analysis.measured_curve) on three prompts whose errors are
known by hand in every bootstrap row: each K's std-GRPO means and traces are 0 (no variance), so its error in a row
is the row's weighted mean over prompt pairs of the bias Gram entries G01, G02, G12. The rows are written out
(``bootstrap.prompt_weights``' layout: the data, the draws, the leave-one-out rows), so the best K of each row, the
bootstrap frequencies, the ratios to the best K and what the printout says follow from the table below."""

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap, measured_curve
from grpo_mse.gradients.estimators import GRPO_STD
from studies.advisor.simulated_records import simulated_batch, simulated_prompt

BUDGET = 8

# Rows: the data; five draws (one with all weight on prompt 0, so no pair and no error; three that keep one pair
# each: G01, G12, G02; one equal to the data); the three leave-one-out rows (pairs 12, 02, 01).
WEIGHTS = np.array(
    [[1, 1, 1], [3, 0, 0], [2, 1, 0], [0, 2, 1], [1, 0, 2], [1, 1, 1], [0, 1, 1], [1, 0, 1], [1, 1, 0]],
    dtype=np.float64,
)


def pair_mean(w, g01, g02, g12):
    """The weighted mean over prompt pairs of three prompts, written out (nan without a pair)."""
    pairs = w[0] * w[1] + w[0] * w[2] + w[1] * w[2]
    return (w[0] * w[1] * g01 + w[0] * w[2] * g02 + w[1] * w[2] * g12) / pairs if pairs else np.nan


def bias_gram(g01, g02, g12):
    """A symmetric bias Gram matrix; its diagonal (9) is unused by the pair mean."""
    return [[9.0, g01, g02], [g01, 9.0, g12], [g02, g12, 9.0]]


def inputs(pairs_by_k: dict, prompts=(0, 1, 2), grams=(GRPO_STD, measured_curve.BIAS_GRAM)):
    """Records and one c1 batch per K over ``prompts``: std-GRPO's traces and Gram 0, the bias Gram of the K's
    pair entries; ``grams`` names the estimator Gram matrices the batches hold."""
    records, batches = {}, {}
    for k, pairs in pairs_by_k.items():
        records[k] = [simulated_prompt(k, i, {GRPO_STD: 0.0}) for i in prompts]
        n = len(prompts)
        zero, bias = np.zeros((n, n)).tolist(), np.asarray(bias_gram(*pairs))[:n, :n].tolist()
        held = {
            GRPO_STD: {"gram": zero, "within_each": [0.0] * n},
            measured_curve.BIAS_GRAM: {"gram": bias, "within_each": [0.0] * n},
        }
        batches[k] = [simulated_batch(k, list(prompts), zero, [0.0] * n, {g: held[g] for g in grams})]
    return records, batches


# K = 2's error is 0 in the draw that keeps pair 01, so its ratio there is undefined; K = 4 is best in one draw.
PAIRS = {2: (0.0, 0.5, 1.0), 4: (0.5, 1.0, 0.75)}


def test_best_k_frequencies_and_ratios_against_the_hand_computed_rows():
    curve = measured_curve.measured_curve(*inputs(PAIRS), BUDGET, None, WEIGHTS)
    errors = {k: np.array([pair_mean(w, *PAIRS[k]) for w in WEIGHTS]) for k in PAIRS}
    assert errors[2][0] == 0.5 and errors[4][0] == 0.75  # the data row: K = 2 is best
    for k in PAIRS:
        assert curve.per_K[str(k)]["error"]["estimate"] == pytest.approx(errors[k][0])
        assert curve.per_K[str(k)]["variance"]["estimate"] == 0.0
    assert curve.K == [2, 4] and curve.K_best_point == 2 and curve.estimator == GRPO_STD
    # Best K per draw (rows 1..5): none (no pair), 2 (0 < 0.5), 4 (0.75 < 1), 2 (0.5 < 1), 2 (0.5 < 0.75).
    assert curve.K_best_frequency == {"2": pytest.approx(3 / 5), "4": pytest.approx(1 / 5)}
    # Each K's error over the best one's (K = 2) in the data row; undefined in the draw without a pair and in
    # the draw where K = 2's error is 0.
    assert curve.error_over_best["2"]["estimate"] == pytest.approx(1.0)
    assert curve.error_over_best["4"]["estimate"] == pytest.approx(0.75 / 0.5)
    assert curve.error_over_best["4"]["n_undefined"] == 2 and curve.error_over_best["2"]["n_undefined"] == 2
    assert curve.identified is False and curve.K_best is None  # draws 3 and 4 give K = 4 ratios 0.75 and 2
    # The saved note is the module's statement of the error (its docstring's second paragraph, on one line).
    assert curve.note.startswith("At a budget of N sequences per step") and "\n" not in curve.note
    assert curve.note.split() == measured_curve.__doc__.split("\n\n")[1].split()


def test_the_printout_lists_each_k_with_its_interval_then_the_verdict():
    curve = measured_curve.measured_curve(*inputs(PAIRS), BUDGET, None, WEIGHTS)
    header, per_k, verdict = measured_curve.describe(curve).split("\n")
    assert header == (
        "  std-normalised GRPO, the run's estimator (budgeted error against its own target, measured at each K; "
        "no decomposition):"
    )
    shown = []
    for k, estimate in ((2, "0.5"), (4, "0.75")):
        low, high = curve.per_K[str(k)]["error"]["ci95"]
        shown.append(f"K={k}: {estimate} [{bootstrap.rounded(low)}, {bootstrap.rounded(high)}]")
    assert low <= 0.75 <= high and per_k == "    " + ", ".join(shown)
    assert verdict == "    " + curve.message and "not separated from K in [4]" in verdict


def test_an_error_undefined_in_the_data_names_no_k():
    """K = 4 measured on one prompt has no prompt pair, so no squared bias and no error: no K is named."""
    records, batches = inputs({2: PAIRS[2]})
    one_records, one_batches = inputs({4: PAIRS[4]}, prompts=(0,))
    curve = measured_curve.measured_curve(
        {**records, **one_records}, {**batches, **one_batches}, BUDGET, None, bootstrap.prompt_weights(3, 20, 0)
    )
    assert curve.K == [2, 4] and curve.per_K["4"]["error"]["estimate"] is None
    assert curve.K_best_point is None and curve.K_best is None and curve.identified is False
    assert curve.message == "best K not identified: an error is undefined"
    assert curve.K_best_frequency == {"2": 0.0, "4": 0.0} and curve.error_over_best == {}


def test_an_exactly_zero_smallest_error_names_no_k():
    curve = measured_curve.measured_curve(*inputs({2: (0.0, 0.0, 0.0), 4: PAIRS[4]}), BUDGET, None, WEIGHTS)
    assert curve.K_best_point == 2 and curve.K_best is None and curve.error_over_best == {}
    assert curve.message.endswith("(K = 2) is not positive (noise)")


def test_a_tie_is_not_separated_and_a_ratio_of_one_and_a_half_is():
    """K = 4's errors equal K = 2's in every row (ratio interval [1, 1]); K = 8's are 1.5 times them."""
    tie = {2: (0.5, 1.0, 1.5), 4: (0.5, 1.0, 1.5), 8: (0.75, 1.5, 2.25)}
    records, batches = inputs(tie)
    weights = bootstrap.prompt_weights(3, 40, 0)
    curve = measured_curve.measured_curve(records, batches, BUDGET, None, weights)
    assert curve.error_over_best["4"]["ci95"] == [1.0, 1.0]
    assert curve.error_over_best["8"]["ci95"] == pytest.approx([1.5, 1.5])
    assert curve.K_best_point == 2 and curve.K_best is None and curve.identified is False
    assert curve.message.endswith("not separated from K in [4]")
    only = measured_curve.measured_curve(records, batches, BUDGET, [2, 8], weights)
    assert only.identified and only.K_best == 2
    assert only.message.startswith("best measured K = 2 (every other measured K's error is larger")


def test_no_k_without_the_bias_grams():
    """Batches holding std-GRPO's Gram matrices but not the bias' give no error at any K, and say so."""
    records, batches = inputs(PAIRS, grams=(GRPO_STD,))
    _, position = bootstrap.prompt_columns(records)
    assert measured_curve.error_at(records[2], batches[2], 2, BUDGET, position, WEIGHTS) is None
    curve = measured_curve.measured_curve(records, batches, BUDGET, None, WEIGHTS)
    expected = "no measured K divides the budget (or no std grams)"
    assert curve.to_json() == {"estimator": GRPO_STD, "K": [], "message": expected}
    assert measured_curve.describe(curve) == f"  std-normalised GRPO (measured at each K): {expected}"
