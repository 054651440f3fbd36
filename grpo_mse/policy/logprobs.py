"""Teacher-forced sequence log-probabilities lp_k = sum_t log pi(y_{k,t} | x, y_{k,<t}) with gradients.

``top_p`` < 1 gives the log-probability of the distribution actually sampled (``--score_distribution sampling``):
log q(y_t) = log pi_T(y_t) - log (mass of pi_T on the nucleus at step t), the nucleus chosen as the sampler does.

``PromptSampler`` puts the two halves of one prompt's work together: its continuations drawn by a sampler and the
function that scores them here with gradients, both with the run's one ``SamplingSettings``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_mse.policy.sampling import HFSampler, SamplingSettings, decode, nucleus_mask
from grpo_mse.tables.inputs import prompt_ids

FAR = -1e30  # log q of a token outside the nucleus (never sampled; finite so that masked positions give 0)


def token_log_probs(
    logits: torch.Tensor, temperature: float, top_p: float = 1.0, targets: torch.Tensor | None = None
) -> torch.Tensor:
    """[..., V] log-softmax of logits / T, renormalised over the nucleus when top_p < 1 (outside: ``FAR``).

    ``targets`` ([...], the tokens actually sampled): each is kept in its own position's nucleus. A token
    sampled just inside the nucleus can fall just outside it when the logits are recomputed (teacher forcing
    in bf16, another kernel or batch shape, vLLM); without this it would get the constant ``FAR``, an
    absurd log-probability and no gradient. With it, its q is renormalised over the nucleus plus itself."""
    logp = torch.log_softmax(widen(logits) / temperature, dim=-1)
    if top_p >= 1.0:
        return logp
    keep = nucleus_mask(logits, temperature, top_p)
    if targets is not None:
        keep.scatter_(-1, targets.to(keep.device).unsqueeze(-1), True)
    log_mass = torch.logsumexp(logp.masked_fill(~keep, float("-inf")), dim=-1, keepdim=True)
    return torch.where(keep, logp - log_mass, torch.full_like(logp, FAR))


def widen(logits: torch.Tensor) -> torch.Tensor:
    """Logits in at least float32 (bf16/fp16 are upcast; a float64 model stays float64)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


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


def sequence_logprobs(
    model,
    prompt: list[int],
    continuations: list[list[int]],
    *,
    eos_ids: list[int],
    pad_id: int,
    include_eos: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """[K] log-probabilities of the continuations given one prompt (log-softmax of logits / T; nucleus-renormalised
    when top_p < 1).

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
    logits = model(
        input_ids=input_ids.to(device), attention_mask=attention.to(device), logits_to_keep=width + 1
    ).logits[:, :-1, :]
    logp = token_log_probs(logits, temperature, top_p, targets)
    token_logp = logp.gather(-1, targets.to(device).unsqueeze(-1)).squeeze(-1)
    mask = continuation_mask(continuations, eos_ids, include_eos).to(device)
    return (token_logp * mask).sum(-1)


# Packed sequences up to this many tokens (beyond it, the quadratic dense mask costs more than it saves).
PACKED_MAX_TOKENS = 4096
PACKED_ATTENTION = ("sdpa", "eager")  # implementations that accept a custom 4D mask
SKIP_PROMPT_LOGITS_MIN = 1 << 20  # output-layer weights from which the packed path skips the prompt's logits


def shared_prompt_logprobs(
    model,
    prompt: list[int],
    continuations: list[list[int]],
    *,
    eos_ids: list[int],
    pad_id: int,
    include_eos: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """Same values as ``sequence_logprobs`` with the prompt run once and attended to by all continuations
    (gradients flow back through it): one packed sequence when the model allows it, else a repeated
    key/value cache."""
    function = packed_prompt_logprobs if packing_applies(model, prompt, continuations) else cached_prompt_logprobs
    return function(
        model,
        prompt,
        continuations,
        eos_ids=eos_ids,
        pad_id=pad_id,
        include_eos=include_eos,
        temperature=temperature,
        top_p=top_p,
    )


def packing_applies(model, prompt: list[int], continuations: list[list[int]]) -> bool:
    """Whether ``packed_prompt_logprobs`` is exact and cheap here: an attention implementation that takes
    a custom mask, a short packed sequence, and no sliding window that positions could reach."""
    config = model.config
    packed = len(prompt) + sum(max(len(c) - 1, 0) for c in continuations)
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    reach = len(prompt) + max(len(c) for c in continuations)
    return (
        getattr(config, "_attn_implementation", None) in PACKED_ATTENTION
        and packed <= PACKED_MAX_TOKENS
        and (window is None or reach <= window)
    )


def prompt_logits_skipped(model, prompt: list[int]) -> int:
    """How many leading positions of a packed sequence get no logits: the prompt's all but last, when the output
    layer is large (>= ``SKIP_PROMPT_LOGITS_MIN`` weights: Qwen2.5-0.5B's 136M over the prompt cost 8% of a forward
    and backward pass at 25 prompt tokens, 15% at 120); for a small one (the built-in policies) the saving is nil
    and all logits keep their old bits."""
    head = model.get_output_embeddings()
    large = head is not None and head.weight.numel() >= SKIP_PROMPT_LOGITS_MIN
    return len(prompt) - 1 if large and prompt else 0


def packed_prompt_logprobs(
    model,
    prompt: list[int],
    continuations: list[list[int]],
    *,
    eos_ids: list[int],
    pad_id: int = 0,
    include_eos: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """Same values as ``sequence_logprobs`` from ONE sequence [prompt | y_1[:-1] | y_2[:-1] | ...]:
    y_k's tokens sit at positions len(prompt) + t and attend to the prompt and to y_k's earlier tokens
    only (a block 4D mask); the prompt's last logits predict every y_k's first token."""
    device = next(model.parameters()).device
    bodies = [c[:-1] for c in continuations]
    size = len(prompt) + sum(len(b) for b in bodies)
    owner = torch.tensor([-1] * len(prompt) + [k for k, b in enumerate(bodies) for _ in b], device=device)
    positions = torch.tensor(
        list(range(len(prompt))) + [len(prompt) + t for b in bodies for t in range(len(b))], device=device
    )
    index = torch.arange(size, device=device)
    allowed = (index[None, :] <= index[:, None]) & ((owner[None, :] == -1) | (owner[None, :] == owner[:, None]))
    if model.config._attn_implementation == "eager":  # additive mask
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    else:
        mask = allowed
    sequence = torch.tensor([list(prompt) + [t for b in bodies for t in b]], device=device)
    first = prompt_logits_skipped(model, prompt)  # rows of the packed sequence whose logits predict nothing
    logits = model(
        input_ids=sequence, attention_mask=mask[None, None], position_ids=positions[None], logits_to_keep=size - first
    ).logits[0]
    predictors, targets, start = [], [], len(prompt)
    for tokens in continuations:  # y_k,0 from the prompt's end; y_k,t+1 from y_k,t (rows counted from ``first``)
        predictors += [len(prompt) - 1 - first] * bool(tokens) + list(
            range(start - first, start - first + len(tokens) - 1)
        )
        targets += tokens
        start += max(len(tokens) - 1, 0)
    targets = torch.tensor(targets, device=device)
    token_logp = token_log_probs(logits[torch.tensor(predictors, device=device)], temperature, top_p, targets)
    token_logp = token_logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    mask = continuation_mask(continuations, eos_ids, include_eos)
    kept = mask[continuation_mask(continuations, [], include_eos=True).bool()].to(device)
    owners = torch.repeat_interleave(
        torch.arange(len(continuations), device=device), torch.tensor([len(c) for c in continuations], device=device)
    )
    totals = torch.zeros(len(continuations), dtype=token_logp.dtype, device=device)
    return totals.index_add(0, owners, token_logp * kept)


def cached_prompt_logprobs(
    model,
    prompt: list[int],
    continuations: list[list[int]],
    *,
    eos_ids: list[int],
    pad_id: int,
    include_eos: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """Same values as ``sequence_logprobs``: the prompt runs once (batch 1) and its key/value cache is
    repeated for the K continuations; gradients flow back through the shared prompt computation."""
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
        next_logits = model(
            input_ids=tokens[:, :-1],
            attention_mask=attention[:, :-1],
            position_ids=positions[:, :-1],
            past_key_values=cache,
        ).logits
        logits = torch.cat([logits, next_logits], dim=1)
    logp = token_log_probs(logits, temperature, top_p, tokens)
    token_logp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return (token_logp * continuation_mask(continuations, eos_ids, include_eos).to(device)).sum(-1)


@dataclass
class PromptSampler:
    """Draw and score the continuations of one prompt: the continuations come from ``source`` (a
    ``sampling.Sampler``: by default an HFSampler of ``model``) with ``settings``, log-probabilities with gradients
    through the HF ``model``."""

    model: object
    tokenizer: object
    settings: SamplingSettings  # temperature, top_p, max_new_tokens, EOS and pad ids: of the draws and the scores
    gen_bs: int
    seed: int
    include_eos: bool = True
    shared_prompt: bool = True  # run the prompt once per group (fast) or once per sequence (reference)
    source: object = None  # the ``sampling.Sampler`` the continuations come from (a run's: make_sampler); None: HF
    score_distribution: str = "model"  # model: grad log pi_T (untruncated); sampling: grad log q (nucleus)

    def __post_init__(self) -> None:
        if self.source is None:
            self.source = HFSampler(self.model, self.settings, self.gen_bs)

    def draw(self, row: dict, stream: tuple[int, ...], count: int) -> tuple[list[int], list[list[int]], list[str]]:
        """(prompt ids, ``count`` continuations, their texts) from random stream (seed, *stream)."""
        (drawn,) = self.draw_all([(row, stream)], count)
        return drawn

    def draw_all(self, rows_and_streams: list[tuple[dict, tuple[int, ...]]], count: int) -> list[tuple]:
        """``draw`` for several prompts in one sampler call: their rows share the sampler's batches (fuller decode
        batches; every sample keeps its own random stream, so the continuations are those of ``draw``)."""
        ids = [prompt_ids(self.tokenizer, row["prompt"]) for row, _ in rows_and_streams]
        requests = [(i, count, (self.seed, *stream)) for i, (_, stream) in zip(ids, rows_and_streams)]
        drawn = self.source.sample(requests)
        return [(i, continuations, decode(self.tokenizer, continuations)) for i, continuations in zip(ids, drawn)]

    def logprob_fn(self, ids: list[int]):
        """continuations -> [K] sequence log-probabilities (with grad) given prompt ``ids``."""
        function = shared_prompt_logprobs if self.shared_prompt else sequence_logprobs
        s = self.settings

        def logprobs(continuations):
            return function(
                self.model,
                ids,
                continuations,
                eos_ids=s.eos_ids,
                pad_id=s.pad_id,
                include_eos=self.include_eos,
                temperature=s.temperature,
                top_p=s.top_p if self.score_distribution == "sampling" else 1.0,
            )

        return logprobs
