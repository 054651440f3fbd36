import pytest
import torch

from grpo_mse.policy.logprobs import continuation_mask, sequence_logprobs


def _manual(model, prompt, tokens, temperature=1.0):
    ids = torch.tensor([prompt + tokens])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens).unsqueeze(-1)).sum()


def test_padded_batch_equals_one_sequence_at_a_time(random_lm):
    prompt = [5, 6, 7, 8]
    continuations = [[9, 10, 1], [11], [12, 13, 14, 15, 2]]
    batch = sequence_logprobs(random_lm, prompt, continuations, eos_ids=[1, 2], pad_id=0, temperature=0.7)
    manual = torch.stack([_manual(random_lm, prompt, c, 0.7) for c in continuations])
    assert torch.allclose(batch, manual, atol=1e-5)


def test_drop_eos_leaves_out_only_a_final_eos(random_lm):
    prompt = [5, 6]
    continuations = [[9, 10, 1], [11, 12]]
    full = sequence_logprobs(random_lm, prompt, continuations, eos_ids=[1], pad_id=0).tolist()
    dropped = sequence_logprobs(random_lm, prompt, continuations, eos_ids=[1], pad_id=0, include_eos=False).tolist()
    assert dropped[1] == pytest.approx(full[1], abs=1e-6)
    assert dropped[0] == pytest.approx(float(_manual(random_lm, prompt, [9, 10]).detach()), abs=1e-5)
    assert dropped[0] > full[0]
    mask = continuation_mask(continuations, [1], include_eos=False)
    assert mask.tolist() == [[1, 1, 0], [1, 1, 0]]


def test_shared_prompt_cache_gives_the_same_values_and_gradients(random_lm):
    from grpo_mse.policy.logprobs import shared_prompt_logprobs

    prompt = [5, 6, 7, 8, 9]
    continuations = [[9, 10, 1], [11], [12, 13, 14, 15, 2]]
    weights = torch.tensor([0.3, -1.0, 0.5])
    results = []
    for fn in (sequence_logprobs, shared_prompt_logprobs):
        values = fn(random_lm, prompt, continuations, eos_ids=[1, 2], pad_id=0, include_eos=False)
        grads = torch.autograd.grad((weights * values).sum(), list(random_lm.parameters()))
        results.append((values.detach(), torch.cat([g.reshape(-1) for g in grads])))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-5)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_and_cached_prompt_paths_give_the_same_values_and_gradients(random_lm, attention):
    """One packed sequence with a block mask == a repeated prompt cache == one padded row per sequence."""
    from grpo_mse.policy.logprobs import cached_prompt_logprobs, packed_prompt_logprobs, packing_applies

    prompt = [5, 6, 7, 8, 9]
    continuations = [[9, 10, 1], [11], [12, 13, 14, 15, 2], [3, 4]]
    weights = torch.tensor([0.3, -1.0, 0.5, 2.0])
    params = list(random_lm.parameters())
    previous = random_lm.config._attn_implementation
    random_lm.config._attn_implementation = attention
    try:
        assert packing_applies(random_lm, prompt, continuations)
        results = []
        for fn in (sequence_logprobs, cached_prompt_logprobs, packed_prompt_logprobs):
            values = fn(random_lm, prompt, continuations, eos_ids=[1, 2], pad_id=0, include_eos=False, temperature=0.7)
            grads = torch.autograd.grad((weights * values).sum(), params)
            results.append((values.detach(), torch.cat([g.reshape(-1) for g in grads])))
    finally:
        random_lm.config._attn_implementation = previous
    manual = torch.stack([_manual(random_lm, prompt, c[:-1] if c[-1] in (1, 2) else c, 0.7) for c in continuations])
    for values, grads in results[1:]:
        torch.testing.assert_close(values, results[0][0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(grads, results[0][1], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(results[2][0], manual.detach(), atol=1e-5, rtol=1e-5)


def test_packing_is_skipped_where_it_would_be_wrong_or_slow(random_lm, monkeypatch):
    from grpo_mse.policy import logprobs

    prompt, continuations = [5, 6, 7], [[1, 2, 3], [4]]
    assert logprobs.packing_applies(random_lm, prompt, continuations)
    monkeypatch.setattr(logprobs, "PACKED_MAX_TOKENS", 4)  # 3 prompt + 2 + 0 body tokens = 5 > 4
    assert not logprobs.packing_applies(random_lm, prompt, continuations)
    monkeypatch.undo()
    monkeypatch.setattr(random_lm.config, "_attn_implementation", "flash_attention_2")
    assert not logprobs.packing_applies(random_lm, prompt, continuations)
    monkeypatch.undo()
    monkeypatch.setattr(random_lm.config, "use_sliding_window", True, raising=False)
    monkeypatch.setattr(random_lm.config, "sliding_window", 5, raising=False)  # positions reach 3 + 3 = 6
    assert not logprobs.packing_applies(random_lm, prompt, continuations)


@pytest.mark.parametrize("large_output_layer", [True, False])
def test_packed_path_skips_the_prompts_logits_only_for_a_large_output_layer(random_lm, monkeypatch, large_output_layer):
    """With a large output layer (Qwen2.5-0.5B: 136M weights; the threshold is lowered here) it sees the prompt's
    last position and the continuation bodies only; a small one (the built-in policies) sees every position, as
    before (the same bits); the log-probabilities are right either way."""
    from grpo_mse.policy import logprobs

    if large_output_layer:
        monkeypatch.setattr(logprobs, "SKIP_PROMPT_LOGITS_MIN", 1)
    prompt, continuations = [5, 6, 7, 8, 9, 10, 11], [[9, 10, 1], [11], [12, 13, 14, 2]]
    rows = []
    head = random_lm.get_output_embeddings()
    hook = head.register_forward_hook(lambda module, inputs, output: rows.append(inputs[0].shape[-2]))
    try:
        values = logprobs.packed_prompt_logprobs(random_lm, prompt, continuations, eos_ids=[1, 2], pad_id=0)
    finally:
        hook.remove()
    bodies = sum(len(c) - 1 for c in continuations)  # 2 + 0 + 3
    assert rows == [1 + bodies if large_output_layer else len(prompt) + bodies]
    manual = torch.stack([_manual(random_lm, prompt, c) for c in continuations])
    torch.testing.assert_close(values.detach(), manual.detach(), atol=1e-5, rtol=1e-5)
