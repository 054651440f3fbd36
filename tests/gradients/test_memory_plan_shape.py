"""The parts of the printed memory plan (grpo_mse.gradients.memory_plan: activation_bytes, likely_rows, run_shape,
RunShape) against small cases worked by hand from the formulas docs/engines.md ("Memory: the plan a run prints")
documents: a printed estimate must match what is measured, so each part is checked against its own arithmetic,
written out in the comments, not against the package's formula."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grpo_mse.gradients import memory_plan
from grpo_mse.gradients.memory_plan import RunShape, RunSizes

# 2 layers, hidden 8, MLP 16, vocabulary 10. A token keeps 16 * 8 + 3 * 16 = 176 values a layer, 352 for both
# layers: 704 bytes in bf16, 1408 in fp32; a continuation token's logits 4 * 10 float32 = 160 bytes.
SIZES = dict(num_hidden_layers=2, hidden_size=8, intermediate_size=16, vocab_size=10)


def test_activations_of_a_small_config_worked_by_hand():
    config = SimpleNamespace(**SIZES)
    # 3 prompt + 5 continuation tokens at 704 bytes (bf16) = 5632, and 5 * 160 = 800 of logits
    assert memory_plan.activation_bytes(config, 3, 5, 2) == 6432
    # a multimodal config keeps the language model's sizes in text_config (its own are the vision tower's)
    outer = SimpleNamespace(text_config=config, num_hidden_layers=50, hidden_size=1000, vocab_size=7)
    assert memory_plan.activation_bytes(outer, 3, 5, 2) == 6432
    assert memory_plan.activation_bytes(None, 3, 5, 2) == 0  # no config: no sizes, nothing planned


@pytest.mark.parametrize(
    "missing, expected",
    [
        # GPT-2's config has no intermediate_size: 2 layers * 16 * 8 = 256 values, 512 bytes a token; 8 tokens + 800
        ("intermediate_size", 8 * 512 + 800),
        ("num_hidden_layers", 800),  # no layers: the logits only
        ("hidden_size", 8 * 2 * 3 * 16 * 2 + 800),  # the MLP-sized vectors only: 2 * 48 values, 192 bytes a token
    ],
)
def test_a_size_the_config_lacks_counts_as_zero(missing, expected):
    sizes = {name: value for name, value in SIZES.items() if name != missing}
    assert memory_plan.activation_bytes(SimpleNamespace(**sizes), 3, 5, 2) == expected
    assert memory_plan.activation_bytes(SimpleNamespace(**sizes, **{missing: None}), 3, 5, 2) == expected


def shape(**changes) -> RunShape:
    """A model-sized fast-engine shape: rows of 1000 bytes, statistics vectors of 2000, largest tensor 300, three
    labels, two rows a pass and eight a prompt, 50 bytes of activations."""
    values = dict(row=1000, vector=2000, largest=300, labels=3, rows_per_pass=2, rows_per_prompt=8, activations=50)
    return RunShape(**{**dict(c1_vectors=0, c1_reads=0), **values, **changes})


def test_a_pass_s_backward_worked_by_hand():
    # model-sized rows, one group a pass: 2 rows * 1000 + the largest gradient twice (600) + activations (50)
    assert shape().backward() == 2650
    # small models take a batched call, whose intermediate gradients double the rows: 4000 + 600 + 50
    assert shape(large=False).backward() == 4650
    assert shape(rows_per_pass=0).backward() == 0  # a prompt with no pass


def test_a_prompt_s_statistics_worked_by_hand():
    fast = shape()
    # 3 rows kept beside the 3 labels' sums (6000): kept rows and a backward (3000 + 2650) above kept + a pass (5000)
    assert fast.statistics(3) == 6000 + 5650
    # all 8 kept: the rows before the last pass and a backward (6000 + 2650) above all 8 rows (8000), no sum formed
    assert fast.statistics(8) == 8650
    # a small model keeps no rows whatever is asked: the sums and a backward (6000 + 4650)
    assert shape(large=False).statistics(3) == 10650
    # the reference engine: a Welford mean and M2 per label (2 * 3 * 2000) and a backward
    assert shape(engine="reference").statistics(3) == 12000 + 2650


def test_c1_s_sums_from_bf16_rows_are_formed_in_new_float32_vectors():
    # bf16 rows (1000 bytes: 500 coordinates) under float32 statistics (2000): two sums c1 reads (4000) and the
    # largest tensor (150 coordinates) upcast beside them (600), whole bytes
    bf16 = shape(c1_reads=2)
    assert bf16.formed() == 4600 and isinstance(bf16.formed(), int)
    # every row kept: all 8 rows and the formed sums (12600) above the rows before the last pass and a backward
    assert bf16.statistics(8) == 8000 + 4600


def test_likely_rows_worked_by_hand():
    # M 2, one prompt of V 0.5 at K 2: its groups differ with probability 1 - 0.25 - 0.25 = 0.5, so it gives
    # 2 + Binomial(2, 0.5) rows, at most 2 with probability 0.25 and at most 3 with 0.75: the median is 3
    assert memory_plan.likely_rows([0.5], [2], 2) == 3
    # M 1: 1 + Binomial(1, 0.5) rows, at most 1 with probability exactly 0.5, which the median reaches
    assert memory_plan.likely_rows([0.5], [2], 1) == 1


def test_a_prompt_with_v_0_makes_no_pass_in_the_fast_and_sketched_engines_and_every_pass_in_the_reference_one():
    """The fast and sketched engines skip a group whose estimators are all exactly 0 (fast.group_plan; sketched_rows
    returns before any pass), so a run whose prompts all have V = 0 likely holds no backward; the reference engine
    makes every pass."""
    import torch

    from grpo_mse.gradients import estimators as est
    from grpo_mse.gradients.trace_engines.fast import group_plan
    from grpo_mse.gradients.trace_engines.sketched import sketched_rows

    def no_pass(continuations):
        raise AssertionError("a forward and backward pass for a group of V = 0")

    zeros = torch.zeros(4, dtype=torch.float64)  # a group of K 4 at V = 0: every reward 0
    plan = group_plan({name: est.weights(name, zeros, 0.0) for name in est.REGISTRY}, zeros)
    assert sketched_rows(no_pass, [], [[1]] * 4, zeros, plan, None)[0] == []
    sketched = shape(engine="sketched", rows_per_pass=1, vector=128, signs=500, rows_likely=0, large=False)
    assert sketched.likely().statistics(0) == sketched.statistics(0) - (2 * 300 + 50)
    # the fast engine: no pass, no row, nothing beside the model (docs: N is then the model and c1's vectors only)
    assert shape(rows_likely=0).likely().statistics(0) == 0
    reference = shape(engine="reference", rows_likely=0)
    assert reference.likely() == reference


def sizes(**changes) -> RunSizes:
    return RunSizes(**{**dict(estimators=("grpo",), m=1, k_list=(2,), max_new_tokens=5), **changes})


def test_run_shape_of_small_meta_models_worked_by_hand():
    import torch

    fp32 = [torch.empty(100, device="meta")]
    config = SimpleNamespace(**SIZES)
    # labels: 4 estimators, their 2 biased ones' biases, the score and grpo_std's own-target helper sum
    assert memory_plan.run_shape(fp32, sizes(estimators=("naive", "grpo", "grpo_std", "drgrpo"))).labels == 8
    # no prompt tokens given: K 2 continuations of 5 tokens only, 10 * 1408 + 10 * 160
    assert memory_plan.run_shape(fp32, sizes(), config).activations == 15680
    bf16 = memory_plan.run_shape([torch.empty(n, dtype=torch.bfloat16, device="meta") for n in (100, 50)], sizes())
    assert (bf16.row, bf16.vector, bf16.largest) == (300, 600, 200)  # bf16 rows, float32 statistics
    assert memory_plan.run_shape([torch.empty(100, dtype=torch.float64, device="meta")], sizes()).vector == 800
    # --groups_per_pass 3 is taken as is: 3 groups, 6 rows a pass (auto would take min(M 8, 128 // K 4) = 8)
    assert memory_plan.run_shape(fp32, sizes(m=8, k_list=(4,), groups_per_pass=3)).rows_per_pass == 6
    # auto for 2^27 parameters: 2 GiB holds 2 groups' two fp32 vectors (2^31 / (8 * 2^27)), 4 rows a pass
    large = memory_plan.run_shape([torch.empty(1 << 27, device="meta")], sizes(m=8, k_list=(4,)))
    assert large.rows_per_pass == 4
    # the prompts' V give the likely rows (M 2, V 0.5, K 2: 3, as worked above); without them, all
    assert memory_plan.run_shape(fp32, sizes(m=2), values=[0.5]).rows_likely == 3
    assert memory_plan.run_shape(fp32, sizes(m=2)).rows_likely is None


def test_the_sketched_engine_s_pass_is_one_group():
    import torch

    run = sizes(engine="sketched", sketch_dim=16, m=4, k_list=(2, 4))
    sketched = memory_plan.run_shape([torch.empty(100, device="meta")], run, SimpleNamespace(**SIZES), 3)
    # one group a pass at every K; the fullest at K 4: 3 + 4 * 5 = 23 tokens at 1408 bytes and 20 * 160 of logits
    assert sketched.activations == 23 * 1408 + 3200
    assert (sketched.vector, sketched.rows_per_pass, sketched.signs) == (8 * 16, 1, 100)


def test_a_model_without_parameters_plans_its_activations_only():
    # no tensor: no row, statistics or largest gradient; activations at fp32: 3 + 10 tokens * 1408 + 10 * 160
    empty = memory_plan.run_shape([], sizes(), SimpleNamespace(**SIZES), 3)
    assert (empty.row, empty.vector, empty.largest, empty.large) == (0, 0, 0, False)
    assert empty.activations == 13 * 1408 + 1600
    plan = memory_plan.plan_run(empty, held=0, available=10**9)
    assert plan.statistics == plan.essential == empty.activations  # one backward: its activations alone
