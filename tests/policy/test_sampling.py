import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_mse.policy.sampling import HFSampler, SamplingSettings, nucleus_sample, stream_seed


def test_inverse_cdf_on_a_uniform_grid_reproduces_the_truncated_distribution():
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    logits = probs.log().repeat(1000, 1)
    grid = (torch.arange(1000) + 0.5) / 1000
    full = torch.bincount(nucleus_sample(logits, grid, 1.0, 1.0), minlength=4) / 1000
    assert torch.allclose(full, probs, atol=1.5e-3)
    nucleus = torch.bincount(nucleus_sample(logits, grid, 1.0, 0.75), minlength=4) / 1000
    assert torch.allclose(nucleus, torch.tensor([0.0, 0.625, 0.0, 0.375]), atol=1.5e-3)
    hot = torch.bincount(nucleus_sample(logits, grid, 0.5, 1.0), minlength=4) / 1000
    assert torch.allclose(hot, probs**2 / (probs**2).sum(), atol=1.5e-3)


def test_top_p_always_keeps_the_most_likely_token():
    logits = torch.tensor([[0.0, 5.0, 1.0]])
    assert nucleus_sample(logits, torch.tensor([0.99]), 1.0, 0.01).item() == 1


def test_streams_are_distinct_and_stable():
    assert stream_seed(0, 4, 7, 0) == stream_seed(0, 4, 7, 0)
    seeds = {stream_seed(0, k, p, j) for k in (4, 8) for p in range(20) for j in range(20)}
    assert len(seeds) == 800
    assert stream_seed(1, 2) != stream_seed(2, 1)


def test_continuations_do_not_depend_on_batching(random_lm):
    prompts = [[3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13]]
    settings = SamplingSettings(eos_ids=(1, 2), pad_id=0, temperature=1.0, top_p=0.9, max_new_tokens=6)
    requests = [(p, 1, (0, 4, i)) for i, p in enumerate(prompts)]
    together = [c for (c,) in HFSampler(random_lm, settings, batch_size=8).sample(requests)]
    alone = [HFSampler(random_lm, settings, batch_size=1).sample([request])[0][0] for request in requests]
    assert together == alone
    for tokens in together:
        assert 1 <= len(tokens) <= 6
        assert all(t not in (1, 2) for t in tokens[:-1])  # nothing is sampled after an EOS


def test_group_prefill_equals_padded_batch(random_lm):
    prompt, other = [3, 4, 5, 6], [7, 8]
    settings = SamplingSettings(eos_ids=(1,), pad_id=0, temperature=1.0, top_p=1.0, max_new_tokens=5)
    (shared,) = HFSampler(random_lm, settings, batch_size=4).sample([(prompt, 4, (9, 1))])  # one prompt: prefilled once
    padded, _ = HFSampler(random_lm, settings, batch_size=5).sample([(prompt, 4, (9, 1)), (other, 1, (9, 2))])
    assert shared == padded


def _rows_per_call(model, run):
    """(input_ids shapes of every forward call made by ``run()``)."""
    shapes = []
    handle = model.register_forward_pre_hook(
        lambda _, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        result = run()
    finally:
        handle.remove()
    return shapes, result


def test_each_distinct_prompt_runs_once_and_finished_rows_leave_the_batch(random_lm):
    prompts = [[3, 4, 5], [6, 7, 8, 9, 10, 11]]
    settings = SamplingSettings(eos_ids=(1, 2), pad_id=0, temperature=1.0, top_p=1.0, max_new_tokens=8)
    requests = [(p, 6, (5, i)) for i, p in enumerate(prompts)]
    sampler = HFSampler(random_lm, settings, batch_size=12)
    shapes, (first, second) = _rows_per_call(random_lm, lambda: sampler.sample(requests))
    assert shapes[0] == (2, 6)  # one prefill: the two distinct prompts, left-padded to the longer
    decode_rows = [rows for rows, width in shapes[1:]]
    assert all(width == 1 for _, width in shapes[1:])
    lengths = [len(c) for c in first + second]
    assert sum(decode_rows) == sum(n - 1 for n in lengths)  # a row is computed only until it samples its last token
    assert min(lengths) < 8 and max(lengths) == 8  # some rows stopped early, some ran to max_new_tokens
    assert decode_rows == sorted(decode_rows, reverse=True) and decode_rows[-1] < 12
    (group,) = HFSampler(random_lm, settings, batch_size=6).sample([requests[1]])
    assert group == second  # the same streams whether the prompt shares its batch or not


def test_a_group_larger_than_the_batch_runs_its_prompt_once_per_batch(random_lm):
    settings = SamplingSettings(eos_ids=(1,), pad_id=0, temperature=1.0, top_p=0.9, max_new_tokens=4)
    sampler = HFSampler(random_lm, settings, batch_size=4)
    shapes, (rows,) = _rows_per_call(random_lm, lambda: sampler.sample([([3, 4, 5, 6], 10, (1,))]))
    assert [s for s in shapes if s[1] > 1] == [(1, 4)] * 3  # batches of 4, 4 and 2 rows: one prefill each
    assert len(rows) == 10


def _full_sort_draw(logits, uniforms, temperature, top_p):
    """The draw as it was before the candidates' fast path: every probability sorted (an independent copy)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    if top_p < 1.0:
        sorted_probs = sorted_probs * ((sorted_probs.cumsum(-1) - sorted_probs) < top_p)
    cumulative = sorted_probs.cumsum(-1)
    picks = torch.searchsorted(cumulative, uniforms.unsqueeze(-1) * cumulative[:, -1:], right=True)
    return order.gather(-1, picks.clamp_(max=cumulative.shape[-1] - 1)).squeeze(-1)


@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([0.5, 3.0, 12.0]),
    temperature=st.sampled_from([0.3, 1.0, 2.5]),
    top_p=st.sampled_from([0.05, 0.5, 0.95, 0.999, 1.0]),
    tied=st.integers(0, 6),
    candidates=st.sampled_from([1, 4, 16, 64]),
)
@settings(max_examples=120, deadline=None)
def test_candidates_draw_equals_the_full_sort_draw(seed, scale, temperature, top_p, tied, candidates):
    """The topk fast path draws the same token as the full sort on every row: wide and narrow nuclei, tied
    logits (copied within a row, so the full sort's order of ties decides), uniforms at 0 and just below 1."""
    import grpo_mse.policy.sampling as sampling

    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn((24, 300), generator=generator) * scale
    top = logits.argsort(dim=-1, descending=True)
    for row in range(0, 24, 3):  # ties among the most likely tokens
        logits[row, top[row, 1 : 1 + tied]] = float(logits[row, top[row, 0]])
    uniforms = torch.rand(24, generator=generator)
    uniforms[:2] = torch.tensor([0.0, 1.0 - 2**-24])
    expected = _full_sort_draw(logits, uniforms, temperature, top_p)
    default, sampling.NUCLEUS_CANDIDATES = sampling.NUCLEUS_CANDIDATES, candidates
    try:
        assert torch.equal(sampling.nucleus_sample(logits, uniforms, temperature, top_p), expected)
    finally:
        sampling.NUCLEUS_CANDIDATES = default


def test_narrow_nuclei_skip_the_full_sort_and_ties_fall_back_to_it(monkeypatch):
    """Rows whose nucleus fits the candidates are drawn without sorting the vocabulary; a row with a tie in its
    nucleus is redrawn through the full sort (only that row)."""
    import grpo_mse.policy.sampling as sampling

    sorted_rows = []
    original = sampling.sorted_nucleus
    monkeypatch.setattr(sampling, "sorted_nucleus", lambda x, t, p: sorted_rows.append(len(x)) or original(x, t, p))
    logits = torch.randn((6, 2000), generator=torch.Generator().manual_seed(0)) * 0.1 - 5.0
    logits[:, :5] = torch.tensor([9.0, 8.0, 7.5, 7.0, 6.0])  # the nucleus: a few tokens
    uniforms = torch.linspace(0.05, 0.95, 6)
    first = sampling.nucleus_sample(logits, uniforms, 1.0, 0.9)
    assert sorted_rows == [] and torch.equal(first, _full_sort_draw(logits, uniforms, 1.0, 0.9))
    logits[2, 1] = logits[2, 0]  # a tie inside row 2's nucleus
    second = sampling.nucleus_sample(logits, uniforms, 1.0, 0.9)
    assert sorted_rows == [1] and torch.equal(second, _full_sort_draw(logits, uniforms, 1.0, 0.9))
