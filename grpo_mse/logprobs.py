"""Teacher-forced sequence log-probabilities lp_k = sum_t log pi(y_{k,t} | x, y_{k,<t}) with gradients."""

from __future__ import annotations

import torch


def continuation_mask(continuations: list[list[int]], eos_ids: list[int], include_eos: bool) -> torch.Tensor:
    """[K, L] 0/1 mask of the tokens that enter lp_k (the final EOS only if ``include_eos``)."""
    width = max(len(c) for c in continuations)
    mask = torch.zeros((len(continuations), width))
    eos = set(eos_ids)
    for row, tokens in enumerate(continuations):
        length = len(tokens)
        if not include_eos and length and tokens[-1] in eos:
            length -= 1
        mask[row, :length] = 1.0
    return mask


def sequence_logprobs(model, prompt: list[int], continuations: list[list[int]], *, eos_ids: list[int],
                      pad_id: int, include_eos: bool = True, temperature: float = 1.0) -> torch.Tensor:
    """[K] log-probabilities of the continuations given one prompt (log-softmax of logits / T).

    The batch is [prompt + y_k] right-padded; only the logits that predict continuation tokens
    are materialised (``logits_to_keep``).
    """
    device = next(model.parameters()).device
    width = max(len(c) for c in continuations)
    count, length = len(continuations), len(prompt) + width
    input_ids = torch.full((count, length), pad_id, dtype=torch.long)
    attention = torch.zeros((count, length), dtype=torch.long)
    targets = torch.full((count, width), pad_id, dtype=torch.long)
    for row, tokens in enumerate(continuations):
        input_ids[row, : len(prompt) + len(tokens)] = torch.tensor(prompt + tokens)
        attention[row, : len(prompt) + len(tokens)] = 1
        targets[row, : len(tokens)] = torch.tensor(tokens)
    logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                   logits_to_keep=width + 1).logits[:, :-1, :]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    token_logp = logp.gather(-1, targets.to(device).unsqueeze(-1)).squeeze(-1)
    mask = continuation_mask(continuations, eos_ids, include_eos).to(device)
    return (token_logp * mask).sum(-1)


def shared_prompt_logprobs(model, prompt: list[int], continuations: list[list[int]], *, eos_ids: list[int],
                           pad_id: int, include_eos: bool = True, temperature: float = 1.0) -> torch.Tensor:
    """Same values as ``sequence_logprobs``, but the prompt is run once and its key/value cache is
    shared by the K continuations; gradients flow back through the shared prompt computation."""
    device = next(model.parameters()).device
    count, width = len(continuations), max(len(c) for c in continuations)
    prompt_out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True, logits_to_keep=1)
    tokens = torch.full((count, width), pad_id, dtype=torch.long)
    for row, ids in enumerate(continuations):
        tokens[row, : len(ids)] = torch.tensor(ids)
    tokens = tokens.to(device)
    mask = continuation_mask(continuations, [], include_eos=True).to(device)  # real (non-pad) positions
    attention = torch.cat([torch.ones((count, len(prompt)), device=device), mask], dim=1).long()
    positions = torch.arange(len(prompt), len(prompt) + width, device=device).expand(count, -1)
    logits = prompt_out.logits[:, -1:, :].expand(count, -1, -1)
    if width > 1:  # the last continuation token predicts nothing: feed all but it
        cache = prompt_out.past_key_values
        cache.batch_repeat_interleave(count)
        next_logits = model(input_ids=tokens[:, :-1], attention_mask=attention[:, :-1],
                            position_ids=positions[:, :-1], past_key_values=cache).logits
        logits = torch.cat([logits, next_logits], dim=1)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    token_logp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return (token_logp * continuation_mask(continuations, eos_ids, include_eos).to(device)).sum(-1)
