"""The fast engine's parts against independent computations (issue 58): estimator weights' affine coefficients,
gradient rows against closed-form per-row gradients, pass slices against their budgets, the backward call plan
(batched, plain, split by reward), rows made on the log-probabilities' device, and what keep_rows leaves alone at the
built-in policies' sizes."""

import pytest
import torch
from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import PromptWork, bias_label, prompt_traces
from grpo_mse.gradients.statistics import BufferPool, dot64
from grpo_mse.gradients.trace_engines import EngineSettings, fast
from grpo_mse.policy.logprobs import sequence_logprobs


def test_affine_coefficients_of_non_binary_rewards_and_the_tolerance_of_the_affinity_check():
    """K w_k = 3 G_k + 1 with rewards neither 0 nor 1 apart gives (3, 1); weights off a line by 1e-7 relative or
    5e-10 absolute are refused (the check's rtol 1e-9, atol 1e-12)."""
    rewards = torch.tensor([0.5, -1.0, 2.0, 0.5], dtype=torch.float64)
    assert fast.affine_coefficients((3.0 * rewards + 1.0) / 4, rewards) == pytest.approx((3.0, 1.0), rel=1e-12)
    g = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    for scaled in ([1.0, 2.0 + 2e-7, 3.0], [0.0, 1e-9, 3e-9]):
        with pytest.raises(ValueError, match="not affine"):
            fast.affine_coefficients(torch.tensor(scaled, dtype=torch.float64) / 3, g)


@pytest.mark.parametrize("batched", [True, False])
def test_row_vjps_equal_closed_form_rows_and_zero_rows_for_an_unused_parameter(batched):
    """Row b is grad <c_b, tanh(X W) 1> = X^T (c_b (1 - tanh^2)) for W; a parameter the output does not use gets a
    zero row of its own shape and dtype (float64 here, not the default float32)."""
    gen = torch.Generator().manual_seed(0)
    used = torch.randn(3, 2, dtype=torch.float64, generator=gen).requires_grad_()
    unused = torch.randn(4, dtype=torch.float64, generator=gen).requires_grad_()
    inputs = torch.randn(5, 3, dtype=torch.float64, generator=gen)
    cotangents = torch.randn(3, 5, dtype=torch.float64, generator=gen)
    rows = fast.row_vjps(torch.tanh(inputs @ used).sum(1), [used, unused], cotangents, batched).rows
    slope = 1 - torch.tanh(inputs @ used.detach()) ** 2
    assert len(rows) == 3
    for row, cotangent in zip(rows, cotangents):
        torch.testing.assert_close(row[0], inputs.T @ (cotangent[:, None] * slope), rtol=1e-12, atol=1e-14)
        assert row[1].shape == unused.shape and row[1].dtype == torch.float64 and not row[1].any()


def test_gradient_rows_are_made_on_the_log_probabilities_device(monkeypatch):
    """The meta device stands in for a GPU: batched rows, plain rows and rows split by reward (with a parameter the
    log-probabilities do not use) are all made there, whatever device the cotangents and weights start on."""
    table = torch.zeros(23, device="meta", requires_grad=True)
    unused = torch.zeros(2, device="meta", requires_grad=True)

    def logprob_fn(continuations):
        return torch.stack([table[torch.tensor(c)].sum() for c in continuations])

    groups = [[[3 + 3 * g + k, 4] for k in range(3)] for g in range(3)]
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.0]])  # 1, 2 and 2 (split) rows

    def weights(group_rewards):
        return {name: est.weights(name, group_rewards, 0.4) for name in (est.VANILLA, est.ORACLE)}

    devices = []
    monkeypatch.setattr(fast, "add_pass", lambda *args, **kw: devices.extend(t.device for r in args[4] for t in r))
    work = PromptWork(logprob_fn, [table, unused], groups, rewards, [est.VANILLA, est.ORACLE], weights)
    for per_pass in (1, 3):
        devices.clear()
        fast.accumulate(work, EngineSettings("fast", groups_per_pass=per_pass))
        assert len(devices) == 2 * 5 and set(devices) == {torch.device("meta")}


def _slices_obey_their_budgets(sizes, step, token_budget, row_token_budget):
    """Slices of groups of ``sizes`` tokens: consecutive, covering every group, never empty, within the budgets
    unless one group alone exceeds them, and each one maximal (the next group would break a budget)."""
    slices = fast.pass_slices([[[7] * n] for n in sizes], step, token_budget, row_token_budget)
    assert [i for s in slices for i in range(s.start, s.stop)] == list(range(len(sizes)))

    def fits(count, tokens):
        return count <= step and tokens <= token_budget and 2 * count * tokens <= row_token_budget

    for index, s in enumerate(slices):
        count, tokens = s.stop - s.start, sum(sizes[s])
        assert count >= 1 and (count == 1 or fits(count, tokens))
        if index + 1 < len(slices):
            assert not fits(count + 1, tokens + sizes[s.stop])
    return slices


@pytest.mark.parametrize(
    "sizes, step, token_budget, row_token_budget, expected",
    [
        ([2, 2, 2], 8, 5, 1 << 16, [(0, 2), (2, 3)]),  # 3 groups hold 6 tokens > 5
        ([5, 3, 3], 8, 6, 1 << 16, [(0, 1), (1, 3)]),  # after a cut the count starts at 0: 3 + 3 = 6 fit
        ([4, 2, 1], 8, 100, 24, [(0, 2), (2, 3)]),  # 2 groups = 4 rows x 6 tokens = 24 fit exactly
        ([4, 2, 7, 2, 2], 2, 100, 1 << 16, [(0, 2), (2, 4), (4, 5)]),
        ([9, 1], 8, 4, 1 << 16, [(0, 1), (1, 2)]),  # a group over the budget still goes, alone
        ([], 4, 100, 1 << 16, []),
    ],
)
def test_pass_slices_at_their_budgets_edges(sizes, step, token_budget, row_token_budget, expected):
    slices = _slices_obey_their_budgets(sizes, step, token_budget, row_token_budget)
    assert [(s.start, s.stop) for s in slices] == expected


@bounded(80)
@given(st.lists(st.integers(1, 9), max_size=12), st.integers(1, 5), st.integers(1, 30), st.integers(1, 300))
def test_pass_slices_obey_their_budgets(sizes, step, token_budget, row_token_budget):
    _slices_obey_their_budgets(sizes, step, token_budget, row_token_budget)


def _calls(random_lm, monkeypatch, rewards, per_pass):
    """The forward passes (their continuations, sorted) and backward calls ("batched", rows) / ("plain",) of one
    prompt's fast-engine statistics."""
    m, k = rewards.shape
    groups = [[[3 + (g * k + j) % 20, 4 + g] for j in range(k)] for g in range(m)]  # all distinct
    calls = []
    real_grad = torch.autograd.grad

    def counted_grad(outputs, inputs, grad_outputs=None, is_grads_batched=False, **kwargs):
        calls.append(("batched", len(grad_outputs)) if is_grads_batched else ("plain",))
        return real_grad(outputs, inputs, grad_outputs=grad_outputs, is_grads_batched=is_grads_batched, **kwargs)

    def logprob_fn(continuations):
        calls.append(("forward", sorted(map(tuple, continuations))))
        return sequence_logprobs(random_lm, [5, 6], continuations, eos_ids=[1], pad_id=0)

    monkeypatch.setattr(torch.autograd, "grad", counted_grad)
    params = list(random_lm.parameters())
    prompt_traces(logprob_fn, params, groups, rewards, 0.4, est.ALL, EngineSettings("fast", groups_per_pass=per_pass))
    return [[tuple(c) for c in group] for group in groups], calls


def test_several_groups_a_pass_make_one_batched_backward_call(random_lm, monkeypatch):
    """Two groups of equal rewards (the s row each) in one pass: one forward, one batched call of 2 rows."""
    groups, calls = _calls(random_lm, monkeypatch, torch.ones(2, 3, dtype=torch.float64), per_pass=2)
    assert calls == [("forward", sorted(groups[0] + groups[1])), ("batched", 2)]


def test_one_group_a_pass_makes_plain_backward_passes(random_lm, monkeypatch):
    """One group a pass with three reward values (a and s, no split): one forward and two plain backward passes."""
    rewards = torch.tensor([[0.0, 0.5, 1.0], [1.0, 0.5, 0.0]], dtype=torch.float64)
    groups, calls = _calls(random_lm, monkeypatch, rewards, per_pass=1)
    assert calls == [call for group in groups for call in (("forward", sorted(group)), ("plain",), ("plain",))]


def test_one_group_of_two_reward_values_goes_through_one_backward_per_value(random_lm, monkeypatch):
    """Binary rewards, one group a pass: a forward and a plain backward pass per reward value over its own
    continuations (0 first), so each sequence goes through one backward pass."""
    rewards = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    groups, calls = _calls(random_lm, monkeypatch, rewards, per_pass=1)
    expected = [
        call
        for group, row in zip(groups, rewards.tolist())
        for value in (0.0, 1.0)
        for call in (("forward", sorted(c for c, r in zip(group, row) if r == value)), ("plain",))
    ]
    assert calls == expected


def _setup(random_lm, m=4, k=3, seed=31):
    gen = torch.Generator().manual_seed(seed)
    groups = [[torch.randint(3, 23, (2,), generator=gen).tolist() for _ in range(k)] for _ in range(m)]
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    return groups, rewards[:m, :k], list(random_lm.parameters())


def _logprobs(random_lm):
    return lambda continuations: sequence_logprobs(random_lm, [7, 8], continuations, eos_ids=[1], pad_id=0)


def test_keep_rows_changes_no_bit_at_the_built_in_sizes_and_bias2_squares_the_reported_mean(random_lm):
    """keep_rows (and the deferred running sums) are for model sizes: at the built-in policies' sizes the statistics
    are bit for bit those without it, and a one-pass prompt's squared bias is ||mean||^2 - tr / M of the float32
    mean it reports (not the exact float64 <T, T> of a deferred sum)."""
    groups, rewards, params = _setup(random_lm)
    m = len(groups)
    for per_pass in (1, m):
        runs = [
            prompt_traces(
                _logprobs(random_lm),
                params,
                groups,
                rewards,
                0.4,
                est.ALL,
                EngineSettings("fast", groups_per_pass=per_pass, keep_rows=keep, measure_score=True),
            )
            for keep in (0, 100)
        ]
        each, kept = runs
        assert (kept.traces, kept.bias2, kept.mean_score_sq) == (each.traces, each.bias2, each.mean_score_sq)
        if per_pass == m:
            for name, bias2 in each.bias2.items():
                difference = each.accumulators[bias_label(name)]
                mean = difference.mean()
                assert bias2 == dot64(mean, mean) - difference.trace() / m


def test_float32_rewards_give_the_statistics_of_the_same_rewards_in_float64(random_lm):
    """Rewards of three values in float32 (the weights are affine in them only to float32 rounding unless the
    engine works in float64): the same statistics as those rewards given in float64."""
    groups, rewards, params = _setup(random_lm)
    rewards = (rewards * 0.7 + 0.1).float()
    results = [
        prompt_traces(_logprobs(random_lm), params, groups, r, 0.3, est.ALL, EngineSettings("fast", groups_per_pass=2))
        for r in (rewards, rewards.double())
    ]
    assert results[0].traces == results[1].traces and results[0].bias2 == results[1].bias2


def test_running_sums_take_their_buffers_from_the_pool_and_give_them_back(random_lm):
    """A prompt's running sums come from the run's pool and go back to it on release, so the next prompt reuses them
    (no fresh model-sized allocation per prompt)."""
    groups, rewards, params = _setup(random_lm)
    pool = BufferPool()
    for _ in range(2):
        stats = prompt_traces(_logprobs(random_lm), params, groups, rewards, 0.4, est.UNBIASED, pool=pool)
        flats = [acc.flat for acc in stats.accumulators.values()]
        assert all(flat is not None for flat in flats) and not any(pool.free.values())
        stats.release()
        assert sum(len(free) for free in pool.free.values()) == len(flats)
