"""The fast engine (two backward passes, running sums) equals the reference (one backward per
estimator, Welford) and an explicit per-group computation with numpy, on the same samples."""

import numpy as np
import pytest
import torch

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients import statistics
from grpo_mse.gradients.engine import prompt_traces
from grpo_mse.gradients.trace_engines import EngineSettings
from grpo_mse.policy.logprobs import sequence_logprobs


def _setup(model, m, k, seed):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, 23, (5,), generator=gen).tolist()
    groups = [
        [
            torch.randint(3, 23, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(k)
        ]
        for _ in range(m)
    ]
    rewards = torch.randint(0, 2, (m, k), generator=gen).double()
    rewards[-1] = torch.arange(k) % 2  # one group with mixed rewards
    rewards[0] = 1.0  # one group with equal rewards: the fast engine's one-backward path
    params = [p for p in model.parameters()]

    def logprob_fn(continuations):
        return sequence_logprobs(model, prompt, continuations, eos_ids=[1], pad_id=0)

    return prompt, groups, rewards, params, logprob_fn


def _explicit_traces(model, groups, rewards, value, logprob_fn, names):
    params = list(model.parameters())
    vectors = {n: [] for n in names}
    for group, g in zip(groups, rewards):
        for n in names:
            loss = (est.weights(n, g, value).float() * logprob_fn(group)).sum()
            grads = torch.autograd.grad(loss, params)
            vectors[n].append(torch.cat([x.reshape(-1) for x in grads]).double().numpy())
    return {n: float(np.trace(np.cov(np.stack(v), rowvar=False, ddof=1))) for n, v in vectors.items()}


@pytest.mark.slow
@pytest.mark.parametrize("m,k", [(2, 2), (5, 4)])
def test_fast_equals_reference_equals_explicit(random_lm, m, k):
    names = est.ALL
    _, groups, rewards, params, logprob_fn = _setup(random_lm, m, k, seed=m * 10 + k)
    fast = prompt_traces(logprob_fn, params, groups, rewards, 0.4, names, EngineSettings("fast")).traces
    reference = prompt_traces(logprob_fn, params, groups, rewards, 0.4, names, EngineSettings("reference")).traces
    explicit = _explicit_traces(random_lm, groups, rewards, 0.4, logprob_fn, names)
    assert explicit["naive"] > 0 and explicit["oracleV"] > 0
    for n in names:
        assert fast[n] == pytest.approx(explicit[n], rel=1e-5, abs=1e-12)
        assert reference[n] == pytest.approx(explicit[n], rel=1e-5, abs=1e-12)


def test_partial_gram_of_large_models_gives_the_traces_of_the_full_one(random_lm, monkeypatch):
    """Large models' passes use a partial Gram matrix (rows x everything, the sums' own squares: the threshold is
    lowered here); traces equal the full matrix's and the explicit computation's, over several passes."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 5, 4, seed=13)
    full = prompt_traces(
        logprob_fn, params, groups, rewards, 0.3, est.ALL, EngineSettings("fast", groups_per_pass=2)
    ).traces
    requested = []
    original = engine.gram64
    monkeypatch.setattr(
        engine,
        "gram64",  # a pass's matrix (several vectors), not bias_squared's <T, T> of one running sum
        lambda v, block=None, rows=None: (len(v) > 1 and requested.append(rows)) or original(v, block, rows),
    )
    monkeypatch.setattr(statistics, "PARTIAL_GRAM_MIN", 1)
    partial = prompt_traces(
        logprob_fn, params, groups, rewards, 0.3, est.ALL, EngineSettings("fast", groups_per_pass=2)
    ).traces
    explicit = _explicit_traces(random_lm, groups, rewards, 0.3, logprob_fn, est.ALL)
    assert len(requested) == 3 and all(r is not None for r in requested)  # passes of 2, 2 and 1 groups
    for n in est.ALL:
        assert partial[n] == pytest.approx(full[n], rel=1e-9)
        assert partial[n] == pytest.approx(explicit[n], rel=1e-5, abs=1e-12)


@pytest.mark.slow
def test_fast_engine_counts_backward_passes(random_lm, monkeypatch):
    """At most two vector-Jacobian products per group (one for equal rewards), one batched call per pass."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 4, 3, seed=7)
    rewards[1] = 0.0
    equal_groups = int(sum(bool(r.max() == r.min()) for r in rewards))
    rows = []
    original = engine.row_vjps
    monkeypatch.setattr(
        engine, "row_vjps", lambda out, ps, cot, batched: rows.append(len(cot)) or original(out, ps, cot, batched)
    )
    split = engine.reward_split_rows  # one group of two reward values: two half-size backward passes
    monkeypatch.setattr(engine, "reward_split_rows", lambda *args: rows.append(2) or split(*args))
    for per_pass, calls in ((1, 4), (3, 2), (4, 1)):
        rows.clear()
        prompt_traces(
            logprob_fn, params, groups, rewards, 0.5, est.UNBIASED, EngineSettings("fast", groups_per_pass=per_pass)
        )
        assert sum(rows) == 2 * 4 - equal_groups and len(rows) == calls
    import grpo_mse.gradients.trace_engines.reference as reference

    single = []
    original_grad = reference.gradient
    monkeypatch.setattr(reference, "gradient", lambda *a, **kw: single.append(1) or original_grad(*a, **kw))
    prompt_traces(logprob_fn, params, groups, rewards, 0.5, est.UNBIASED, EngineSettings("reference"))
    assert len(single) == 3 * 4


@pytest.mark.slow
@pytest.mark.parametrize("per_pass", [1, 2, 3, 5])
def test_groups_per_pass_does_not_change_traces(random_lm, per_pass):
    _, groups, rewards, params, logprob_fn = _setup(random_lm, 5, 4, seed=11)
    one = prompt_traces(logprob_fn, params, groups, rewards, 0.3, est.ALL, EngineSettings("fast", groups_per_pass=1))
    many = prompt_traces(
        logprob_fn, params, groups, rewards, 0.3, est.ALL, EngineSettings("fast", groups_per_pass=per_pass)
    )
    for n in est.ALL:
        assert many.traces[n] == pytest.approx(one.traces[n], rel=1e-5)


def test_batched_rows_equal_plain_passes_and_fallback(random_lm, monkeypatch):
    """The batched call, plain passes, and the fallback for an operation without a vmap rule agree."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 4, 3, seed=5)
    batched = engine.row_vjps(logprob_fn(groups[0] + groups[1]), params, torch.eye(6)[:3], batched=True)
    plain = engine.row_vjps(logprob_fn(groups[0] + groups[1]), params, torch.eye(6)[:3], batched=False)
    assert batched.stacked is not None and plain.stacked is None
    real_grad = torch.autograd.grad

    def no_vmap(*args, **kwargs):
        if kwargs.get("is_grads_batched"):
            raise RuntimeError("vmap: no batching rule")
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", no_vmap)
    looped = engine.row_vjps(logprob_fn(groups[0] + groups[1]), params, torch.eye(6)[:3], batched=True)
    assert looped.stacked is None
    for other in (plain, looped):
        for row_a, row_b in zip(batched.rows, other.rows):
            for x, y in zip(row_a, row_b):
                torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)
    assert float(sum(x.abs().sum() for x in looped.rows[0])) > 0


def test_auto_groups_per_pass_respects_memory():
    from grpo_mse.gradients.memory import groups_per_pass

    assert [groups_per_pass(k, 1000) for k in (2, 8, 16, 64, 256)] == [64, 16, 8, 2, 1]
    assert groups_per_pass(2, 500_000_000) == 1  # 0.5B parameters: 2 fp32 vectors per group = 4 GB
    assert groups_per_pass(2, 10**9, requested=3) == 3


def test_grpo_vector_is_zero_for_equal_rewards_and_still_counts(random_lm):
    _, groups, rewards, params, logprob_fn = _setup(random_lm, 3, 2, seed=3)
    rewards[:] = 1.0
    stats = prompt_traces(logprob_fn, params, groups, rewards, 0.5, est.UNBIASED, EngineSettings("fast"))
    assert stats.traces["grpo"] == 0.0 and stats.accumulators["grpo"].count == 3
    assert stats.traces["naive"] > 0


def test_m_below_two_is_rejected(random_lm):
    _, groups, rewards, params, logprob_fn = _setup(random_lm, 2, 2, seed=1)
    with pytest.raises(ValueError, match="M must be >= 2"):
        prompt_traces(logprob_fn, params, groups[:1], rewards[:1], 0.5)


def test_vectors_no_estimator_uses_are_not_computed(random_lm, monkeypatch):
    """All rewards 0 with V = 0: every estimator is exactly 0, so no pass at all (groups still count);
    vanilla alone needs a for mixed groups, s (= a / G_1) for equal non-zero rewards, nothing for all-zero."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 4, 3, seed=9)
    calls, rows = [], []
    original = engine.row_vjps
    monkeypatch.setattr(
        engine, "row_vjps", lambda out, ps, cot, batched: rows.append(len(cot)) or original(out, ps, cot, batched)
    )
    split = engine.reward_split_rows  # one group of two reward values: two half-size backward passes
    monkeypatch.setattr(engine, "reward_split_rows", lambda *args: rows.append(2) or split(*args))
    counted = lambda cont: calls.append(1) or logprob_fn(cont)  # noqa: E731
    zero = prompt_traces(counted, params, groups, torch.zeros(4, 3), 0.0, est.UNBIASED, EngineSettings("fast"))
    assert not calls and not rows
    assert all(zero.traces[n] == 0.0 and zero.accumulators[n].count == 4 for n in est.UNBIASED)
    rewards[2] = 0.0
    nonzero = int(sum(bool(r.abs().max() > 0) for r in rewards))
    alone = prompt_traces(counted, params, groups, rewards, 0.4, ["naive"], EngineSettings("fast", groups_per_pass=1))
    assert sum(rows) == nonzero == 3 and len(rows) == 3
    with_s = prompt_traces(
        logprob_fn, params, groups, rewards, 0.4, est.UNBIASED, EngineSettings("fast", groups_per_pass=1)
    )
    assert alone.traces["naive"] == pytest.approx(with_s.traces["naive"], rel=1e-6)


def test_pass_slices_respect_group_count_and_token_budget():
    from grpo_mse.gradients.trace_engines.fast import pass_slices

    groups = [[[1] * n, [2]] for n in (3, 1, 6, 1, 1)]  # tokens per group: 4, 2, 7, 2, 2
    assert pass_slices(groups, step=8, token_budget=100) == [slice(0, 5)]
    assert pass_slices(groups, step=2, token_budget=100) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert pass_slices(groups, step=8, token_budget=6) == [slice(0, 2), slice(2, 3), slice(3, 5)]
    assert pass_slices(groups, step=8, token_budget=1) == [slice(i, i + 1) for i in range(5)]  # >= 1 group
    # rows x tokens: 2 groups = 4 rows x 6 tokens = 24 fit in 30; 3 groups = 6 x 13 do not
    assert pass_slices(groups, step=8, token_budget=100, row_token_budget=30) == [slice(0, 2), slice(2, 3), slice(3, 5)]


@pytest.mark.slow
def test_duplicate_continuations_run_once_and_leave_traces_unchanged(random_lm, monkeypatch):
    """lp depends on the tokens only: copies share one row of the pass, their cotangents summed."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 5, 4, seed=13)
    groups = [[group[0], group[1], group[0], groups[0][0]] for group in groups]  # many repeats
    distinct = {tuple(c) for group in groups for c in group}
    seen = []
    monkeypatch.setattr(
        engine,
        "row_vjps",
        lambda out, ps, cot, batched, real=engine.row_vjps: seen.append(len(out)) or real(out, ps, cot, batched),
    )
    fast = prompt_traces(logprob_fn, params, groups, rewards, 0.3, est.ALL, EngineSettings("fast", groups_per_pass=5))
    reference = prompt_traces(logprob_fn, params, groups, rewards, 0.3, est.ALL, EngineSettings("reference"))
    assert seen == [len(distinct)] and len(distinct) < 20
    for n in est.ALL:
        assert fast.traces[n] == pytest.approx(reference.traces[n], rel=1e-5, abs=1e-12)
        assert fast.bias2.get(n, 0.0) == pytest.approx(reference.bias2.get(n, 0.0), rel=1e-5, abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["packed_prompt_logprobs", "cached_prompt_logprobs"])
def test_fast_engine_on_shared_prompt_paths_equals_reference(random_lm, path):
    """The fast engine's shared-prompt log-probabilities (packed or cached) give the reference's traces."""
    import grpo_mse.policy.logprobs as logprobs

    prompt, groups, rewards, params, logprob_fn = _setup(random_lm, 4, 4, seed=17)
    shared = getattr(logprobs, path)

    def shared_fn(continuations):
        return shared(random_lm, prompt, continuations, eos_ids=[1], pad_id=0)

    fast = prompt_traces(shared_fn, params, groups, rewards, 0.2, est.ALL, EngineSettings("fast")).traces
    reference = prompt_traces(logprob_fn, params, groups, rewards, 0.2, est.ALL, EngineSettings("reference")).traces
    for n in est.ALL:
        assert fast[n] == pytest.approx(reference[n], rel=1e-5, abs=1e-12)


@pytest.mark.parametrize(
    "error, falls_back",
    [
        (RuntimeError("Batching rule not implemented for aten::foo. We could not generate a fallback."), True),
        (RuntimeError("vmap: It looks like you're calling .item() on a Tensor"), True),
        (RuntimeError("CUDA error: device-side assert triggered"), False),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    ],
)
def test_only_a_missing_vmap_rule_falls_back(random_lm, monkeypatch, error, falls_back):
    """The plain-pass fallback is for the no-batching-rule error only; OOM names --groups_per_pass."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 4, 3, seed=5)
    real_grad = torch.autograd.grad

    def failing(*args, **kwargs):
        if kwargs.get("is_grads_batched"):
            raise error
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", failing)
    output = logprob_fn(groups[0] + groups[1])
    if falls_back:
        assert engine.row_vjps(output, params, torch.eye(6)[:3], batched=True).stacked is None
        return
    with pytest.raises(type(error)) as raised:
        engine.row_vjps(output, params, torch.eye(6)[:3], batched=True)
    assert ("--groups_per_pass" in str(raised.value)) == isinstance(error, torch.OutOfMemoryError)


def test_model_sized_passes_skip_zero_running_sums_and_keep_traces_and_biases(random_lm, monkeypatch):
    """At model sizes (threshold lowered here) a running sum that is still exactly zero (GRPO after groups with
    equal rewards) is not allocated nor put in the Gram matrix, and bias_squared uses <T, T> / n^2: the traces,
    squared biases and score statistics equal the small-model path's and the explicit computation's."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 5, 4, seed=21)
    rewards[1] = 0.0  # the first two groups have equal rewards: GRPO's coefficients are 0 there
    rewards[2] = torch.tensor([1.0, 0.0, 0.0, 1.0])
    names = est.ALL
    small = prompt_traces(
        logprob_fn, params, groups, rewards, 0.3, names, EngineSettings("fast", groups_per_pass=1, measure_score=True)
    )
    sizes = []
    original = engine.gram64
    monkeypatch.setattr(
        engine, "gram64", lambda v, block=None, rows=None: sizes.append(len(v)) or original(v, block, rows)
    )
    monkeypatch.setattr(statistics, "PARTIAL_GRAM_MIN", 1)
    large = prompt_traces(
        logprob_fn, params, groups, rewards, 0.3, names, EngineSettings("fast", groups_per_pass=1, measure_score=True)
    )
    labels = len(large.accumulators)
    assert sizes[1] < 1 + labels  # the second pass (one row s) leaves out the sums that are still zero
    explicit = _explicit_traces(random_lm, groups, rewards, 0.3, logprob_fn, names)
    for n in names:
        assert large.traces[n] == pytest.approx(small.traces[n], rel=1e-9)
        assert large.traces[n] == pytest.approx(explicit[n], rel=1e-5, abs=1e-12)
    for n in small.bias2:  # the small path squares the float32-rounded mean T / n: float32 rounding apart
        assert large.bias2[n] == pytest.approx(small.bias2[n], rel=1e-6, abs=1e-12)
    assert large.mean_score_sq == pytest.approx(small.mean_score_sq, rel=1e-6)
    assert large.score_trace == pytest.approx(small.score_trace, rel=1e-9)


@pytest.mark.parametrize("keep_rows", [1, 3, 4, 100])
def test_kept_rows_give_the_traces_with_fewer_gram_matrices_and_form_only_read_sums(random_lm, monkeypatch, keep_rows):
    """``keep_rows`` (model sizes, threshold lowered here): the rows of several passes go to the statistics at
    once. Traces, squared biases and score statistics equal a pass at a time's and the explicit computation's;
    passes are merged while their rows fit (one Gram matrix for all when they all fit); a prompt whose rows all
    fit forms no running sum until one is read, and the one read (c1's oracle sum) has a pass at a time's bits."""
    import grpo_mse.gradients.trace_engines.fast as engine

    _, groups, rewards, params, logprob_fn = _setup(random_lm, 5, 4, seed=22)
    rewards[1] = 0.0  # one row (s) for each of the two groups of equal rewards, two for the others: 8 rows
    names = est.ALL
    monkeypatch.setattr(statistics, "PARTIAL_GRAM_MIN", 1)
    each = prompt_traces(
        logprob_fn, params, groups, rewards, 0.3, names, EngineSettings("fast", groups_per_pass=1, measure_score=True)
    )
    calls = []
    original = engine.add_pass
    monkeypatch.setattr(engine, "add_pass", lambda *a, **kw: calls.append(len(a[4])) or original(*a, **kw))
    kept = prompt_traces(
        logprob_fn,
        params,
        groups,
        rewards,
        0.3,
        names,
        EngineSettings("fast", groups_per_pass=1, measure_score=True, keep_rows=keep_rows),
    )
    expected = {1: [1, 1, 2, 2, 2], 3: [2, 2, 2, 2], 4: [4, 4], 100: [8]}[keep_rows]  # rows per Gram matrix
    assert calls == expected
    explicit = _explicit_traces(random_lm, groups, rewards, 0.3, logprob_fn, names)
    for n in names:  # a pass at a time merges float32-rounded running sums: they agree to float32 rounding
        assert kept.traces[n] == pytest.approx(each.traces[n], rel=1e-7)
        assert kept.traces[n] == pytest.approx(explicit[n], rel=1e-5, abs=1e-12)
    for n in each.bias2:
        assert kept.bias2[n] == pytest.approx(each.bias2[n], rel=1e-6, abs=1e-12)
    assert kept.mean_score_sq == pytest.approx(each.mean_score_sq, rel=1e-6)
    formed = [label for label, stats in kept.accumulators.items() if stats.sums is not None]
    assert formed == ([] if len(expected) == 1 else list(kept.accumulators))
    for a, b in zip(kept.accumulators[est.ORACLE].total, each.accumulators[est.ORACLE].total):
        assert torch.equal(a, b)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_kept_rows_at_a_prompt_whose_rewards_all_equal_its_value_give_zero_sums(random_lm, monkeypatch, value):
    """A prompt whose rewards all equal V (0 or 1: the oracle's, GRPO's and std-GRPO's x_g are all exactly 0) at
    model sizes with kept rows (a real LLM's default path, threshold lowered here): its deferred running sums are
    zero, and c1's vectors (the advisor, on by default) are read without error and equal a pass at a time's. The
    deferred pass once kept an empty list of terms and failed reading it (IndexError in ``materialize``)."""
    from types import SimpleNamespace

    from grpo_mse.runs.advisor_hook import c1_vectors

    _, groups, _, params, logprob_fn = _setup(random_lm, 4, 3, seed=23)
    rewards = torch.full((4, 3), value, dtype=torch.float64)
    names = est.ALL
    monkeypatch.setattr(statistics, "PARTIAL_GRAM_MIN", 1)
    out = {}
    for keep_rows in (0, 100):
        stats = prompt_traces(
            logprob_fn, params, groups, rewards, value, names, EngineSettings("fast", keep_rows=keep_rows)
        )
        record = SimpleNamespace(tr_cov=stats.traces)
        out[keep_rows] = (stats.traces, [vector for vector, _, _ in c1_vectors(stats, record)])
    (each_traces, each_vectors), (kept_traces, kept_vectors) = out[0], out[100]
    for name in (est.ORACLE, est.GRPO, est.GRPO_STD):
        assert kept_traces[name] == 0.0 == each_traces[name]
    explicit = _explicit_traces(random_lm, groups, rewards, value, logprob_fn, [est.VANILLA])[est.VANILLA]
    assert kept_traces[est.VANILLA] == pytest.approx(explicit, rel=1e-5, abs=1e-12)
    assert (explicit > 0) == (value == 1.0)  # vanilla's rows exist at V = 1 only
    assert len(kept_vectors) == len(each_vectors) >= 1
    for kept_vector, each_vector in zip(kept_vectors, each_vectors):
        assert [t.shape for t in kept_vector] == [p.shape for p in params]
        assert all(torch.count_nonzero(t) == 0 for t in kept_vector)
        assert all(torch.equal(a, b) for a, b in zip(kept_vector, each_vector))
