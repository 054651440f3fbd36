import pytest
import torch

from grpo_mse.logprobs import continuation_mask, sequence_logprobs


def _manual(model, prompt, tokens, temperature=1.0):
    ids = torch.tensor([prompt + tokens])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1] / temperature
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
    from grpo_mse.logprobs import shared_prompt_logprobs

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
