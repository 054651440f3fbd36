"""error_model against the paper's formulas written out here and c1 computed by hand from per-prompt vectors (found
by mutation testing, results/mutation): the paper's bound c1 K/N + c2/N + c3/(N K) (SPEC, Theorem 7), the exact
minimiser 1 + sqrt(c3/c1) of c1 K + c3/(K - 1) and its documented edges (inf, 1, nan) without RuntimeWarnings,
batch_c1 with weights of any scale, a replicate with no within-batch pair, a Gram entry the progress log saved as
null and a prompt in two batches, and ``status`` of saved advice (its allowed K; advice with no K that fits)."""

import json
import math
import warnings
from dataclasses import replace

import numpy as np
import pytest

from grpo_mse.analysis import error_model
from grpo_mse.tables.outputs import to_json
from grpo_mse.tables.records import C1BatchRecord
from studies.advisor.simulated_records import simulated_batch


def test_paper_bound_is_the_papers_formula():
    """c1 K/N + c2/N + c3/(N K) at several K (SPEC, Theorem 7), and below the exact error by c3/(N K (K - 1))."""
    c1, c2, c3, budget = 0.7, 3.0, 5.0, 64
    ks = [2, 4, 8]
    expected = [c1 * k / budget + c2 / budget + c3 / (budget * k) for k in ks]
    assert error_model.paper_bound(c1, c2, c3, ks, budget) == pytest.approx(expected, rel=1e-12)
    gap = error_model.exact_error(c1, c2, c3, ks, budget) - error_model.paper_bound(c1, c2, c3, ks, budget)
    assert gap == pytest.approx([c3 / (budget * k * (k - 1)) for k in ks], rel=1e-9)


def test_k_star_minimises_the_exact_error_and_its_edges_raise_no_warning():
    """K* = 1 + sqrt(c3/c1) is where c1 K + c3/(K - 1) is smallest on a fine grid; the documented edges, c1 = 0
    or c3 = 0 exactly (e.g. every V in {0, 1} gives c1 = c3 = 0), give inf, 1 and nan with no RuntimeWarning
    (a user would see it on stderr), and any c3 > 0 with c1 <= 0, however small, gives inf."""
    grid = np.linspace(1.001, 20, 200_000)
    for c1, c3 in ((1.0, 9.0), (0.3, 2.0), (4.0, 0.5)):
        argmin = grid[np.argmin(c1 * grid + c3 / (grid - 1))]
        assert float(error_model.k_star(c1, c3)) == pytest.approx(argmin, abs=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        star = error_model.k_star([0.0, 0.0, 2.0, 0.0, -1.0, 0.0], [9.0, 0.5, 0.0, 0.0, 0.25, -1.0])
    assert list(star[:3]) == [math.inf, math.inf, 1.0] and np.isnan(star[3])
    assert star[4] == math.inf and np.isnan(star[5])


def _vectors_and_batches(within_each=None):
    """Five prompts' mean gradients in batches {0, 1, 2} and {3, 4}, each batch's Gram matrix as saved."""
    vectors = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 2.0], [3.0, 0.0, 1.0], [-2.0, 1.0, 1.0], [0.0, 4.0, -1.0]])
    within = [0.1, 0.4, 0.2, 0.3, 0.5] if within_each is None else within_each
    layout = [[0, 1, 2], [3, 4]]
    batches = [
        simulated_batch(2, index, (vectors[index] @ vectors[index].T).tolist(), [within[i] for i in index])
        for index in layout
    ]
    return vectors, within, layout, batches


def _hand_c1(weights, vectors, within, layout):
    """mean_i W_i (||v_i||^2 - within_i) / sum W - sum over within-batch pairs i != j of W_i W_j <v_i, v_j> / sum
    of W_i W_j over those pairs, by loops."""
    diag = sum(weights[i] * (vectors[i] @ vectors[i] - within[i]) for batch in layout for i in batch)
    pairs = [(i, j) for batch in layout for i in batch for j in batch if i != j]
    cross = sum(weights[i] * weights[j] * (vectors[i] @ vectors[j]) for i, j in pairs)
    return diag / sum(weights) - cross / sum(weights[i] * weights[j] for i, j in pairs)


def test_batch_c1_by_hand_at_any_weight_scale_and_without_pairs():
    """c1 equals the hand computation for unit weights and for weights scaled by 0.1 (the same value: c1 is a
    ratio of weighted means, so the scale of the weights cancels); a replicate that keeps at most one prompt of
    each batch has no within-batch pair: c1 undefined (nan), with no RuntimeWarning."""
    vectors, within, layout, batches = _vectors_and_batches()
    position = {i: i for i in range(5)}
    weights = np.array([np.ones(5), 0.1 * np.ones(5), [0.2, 0.05, 0.0, 0.3, 0.1], [2.0, 0.0, 0.0, 0.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c1 = error_model.batch_c1(weights, batches, position)
        value, derivative = error_model.batch_c1(weights, batches, position, gradient=True)
    for row in range(3):
        assert c1[row] == pytest.approx(_hand_c1(weights[row], vectors, within, layout), rel=1e-12)
    assert c1[1] == pytest.approx(c1[0], rel=1e-12)
    assert np.isnan(c1[3]) and np.isnan(value[3]) and np.isnan(derivative[3]).all()
    assert np.array_equal(value[:3], c1[:3])


def test_batch_c1_of_a_gram_saved_with_null_is_undefined_not_a_crash():
    """The progress log saves a non-finite number as null; a resumed run reads such a batch back with None in
    its Gram matrix or its within-prompt terms. c1 is then undefined (nan, the advisor pools the other K), not a
    TypeError."""
    _, _, _, batches = _vectors_and_batches()
    gram = [row[:] for row in batches[0].gram]
    gram[0][1] = gram[1][0] = math.inf
    line = json.loads(to_json(replace(batches[0], gram=gram).to_json()))
    assert line["gram"][0][1] is None
    saved = C1BatchRecord.from_json(line)
    c1 = error_model.batch_c1(np.ones((2, 5)), [saved, batches[1]], {i: i for i in range(5)})
    assert np.isnan(c1).all()
    within = list(batches[0].within_each)  # the same for a non-finite within-prompt term (a prompt's trace)
    within[0] = math.inf
    line = json.loads(to_json(replace(batches[0], within_each=within).to_json()))
    assert line["within_each"][0] is None
    c1 = error_model.batch_c1(np.ones((2, 5)), [C1BatchRecord.from_json(line), batches[1]], {i: i for i in range(5)})
    assert np.isnan(c1).all()


def test_batch_c1_derivative_with_a_prompt_in_two_batches():
    """A prompt evaluated in two batches contributes to both: d c1 / d W_i still equals a central finite
    difference of c1 in that prompt's weight (the batches' contributions add up)."""
    vectors, within, _, _ = _vectors_and_batches()
    layout = [[0, 1, 2], [2, 3, 4]]
    batches = [
        simulated_batch(2, index, (vectors[index] @ vectors[index].T).tolist(), [within[i] for i in index])
        for index in layout
    ]
    position = {i: i for i in range(5)}
    weights = np.array([np.ones(5), [1.0, 2.0, 1.0, 0.0, 3.0]])
    _, derivative = error_model.batch_c1(weights, batches, position, gradient=True)
    shifts = 1e-6 * np.eye(5)  # every prompt's weight moved up and down in each row, all in one call
    up, down = ((weights[:, None, :] + sign * shifts[None]).reshape(-1, 5) for sign in (1, -1))
    numeric = (error_model.batch_c1(up, batches, position) - error_model.batch_c1(down, batches, position)) / 2e-6
    assert derivative == pytest.approx(numeric.reshape(2, 5), rel=1e-6, abs=1e-8)


IDENTIFIED = {"c1": 1.0, "c2": 2.0, "c3": 9.0}, {"c1": [0.5, 1.5], "c3": [4.0, 14.0]}


def test_status_uses_the_advice_s_allowed_k():
    """Saved advice with allowed_K [8, 16]: the best K is the argmin of c1 K + c3/(K - 1) over those two (8),
    not over the powers of two dividing the budget (4 = K* there); K* = 1 + sqrt(c3/c1) = 4."""
    constants, ci = IDENTIFIED
    allowed = [8, 16]
    best = min(allowed, key=lambda k: constants["c1"] * k + constants["c3"] / (k - 1))
    result = error_model.status(constants, ci, allowed, 64)
    assert result.identified is True and best == 8
    assert result.K_best == best and result.K_star_exact == pytest.approx(1 + math.sqrt(9.0 / 1.0))


def test_status_of_advice_with_no_k_that_fits_its_budget():
    """Allowed K that do not divide the budget, or a budget that is not a number: not identified (False, as
    saved JSON false), no K, and a message that says why."""
    constants, ci = IDENTIFIED
    for allowed, budget in (([3], 64), ([4], "many")):
        result = error_model.status(constants, ci, allowed, budget)
        assert result.identified is False and result.K_star_exact is None and result.K_best is None
        assert result.message == "best K not identified: the advice names no allowed K that fits its budget"
