"""Sample continuations with temperature and nucleus (top-p) filtering, one random stream per row.

Each sequence owns a ``torch.Generator`` seeded from (seed, stream key..., sample index), so a
continuation does not depend on batch size, batch composition, resumption or sharding.

A batch runs each distinct prompt once (its key/value cache expanded to that prompt's rows), and a row leaves the
batch when it samples an EOS; tests/policy/test_sampling_golden.py holds token ids recorded before these two
changes and checks they are reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from grpo_mse.policy.loading import eos_token_ids

# A sampling request: (prompt token ids, number of samples n, stream key); sample j of it uses the random
# stream (*key, j) on every backend (HF: one torch.Generator per sample; vLLM: one seed per request).
Request = tuple[list[int], int, tuple[int, ...]]


@dataclass(frozen=True)
class SamplingSettings:
    """How continuations are drawn: softmax(logits / temperature), nucleus top_p, at most max_new_tokens,
    stopping at any of eos_ids (kept at the end); pad_id fills batches."""

    eos_ids: tuple[int, ...]
    pad_id: int
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 32

    @classmethod
    def of_run(cls, config, model, tokenizer) -> SamplingSettings:
        """A run's settings: ``config``'s temperature, top_p and max_new_tokens flags, the policy's EOS ids and
        the tokenizer's pad id (the one place where a run's sampling flags are copied)."""
        return cls(
            tuple(eos_token_ids(model, tokenizer)),
            tokenizer.pad_token_id,
            config.temperature,
            config.top_p,
            config.max_new_tokens,
        )


@dataclass(frozen=True)
class ResponseLengths:
    """How long a prompt's sampled continuations are: the mean number of generated tokens (an EOS token that ended a
    continuation counted: it is sampled, and scored unless --drop_eos), the share that ended in an EOS token and the
    share cut at max_new_tokens without one. Short answers give small score norms ||s||^2 and so small MSEs, which is
    why every run records them (docs/experiments.md compares ours with the paper's scale)."""

    mean_new_tokens: float
    share_eos: float
    share_cut: float

    @classmethod
    def of(cls, continuations: list[list[int]], settings: SamplingSettings) -> ResponseLengths:
        eos = set(settings.eos_ids)
        ended = [bool(c) and c[-1] in eos for c in continuations]
        cut = [not e and len(c) >= settings.max_new_tokens for c, e in zip(continuations, ended)]
        n = len(continuations)
        return cls(sum(map(len, continuations)) / n, sum(ended) / n, sum(cut) / n)


def stream_seed(*key: int) -> int:
    """A 63-bit seed derived from integer ``key`` parts (numpy SeedSequence: well mixed, stable)."""
    state = np.random.SeedSequence([int(k) & 0xFFFFFFFF for k in key] + [len(key)]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def sorted_nucleus(logits: torch.Tensor, temperature: float, top_p: float):
    """(probabilities sorted descending with those outside the nucleus set to 0, their token order): the nucleus
    is the smallest set of most likely tokens of softmax(logits / T) (float32) with mass >= top_p."""
    probs = torch.softmax(logits.detach().float() / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    if top_p < 1.0:
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs = sorted_probs * (mass_before < top_p)
    return sorted_probs, order


def nucleus_mask(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Boolean [..., V]: the tokens ``nucleus_sample`` can draw (same rule, same float32 probabilities)."""
    sorted_probs, order = sorted_nucleus(logits, temperature, top_p)
    return torch.zeros_like(sorted_probs, dtype=torch.bool).scatter_(-1, order, sorted_probs > 0)


# Most likely tokens a draw looks at first: a step's nucleus is usually a few dozen tokens, and topk over 256 of
# SmolLM2's 49,152 probabilities costs a fraction of the full sort (the sort was ~30% of sampling on the CPU).
NUCLEUS_CANDIDATES = 256
MASS_MARGIN = 1e-4  # float32 rounding of a cumulative sum is far below this


def _inverse_cdf(sorted_probs: torch.Tensor, order: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """(picked position in ``order``, token): the draw of ``uniforms`` from masked probabilities sorted descending."""
    cumulative = sorted_probs.cumsum(-1)
    targets = uniforms.to(cumulative.device).unsqueeze(-1) * cumulative[:, -1:]
    picks = torch.searchsorted(cumulative, targets, right=True).clamp_(max=cumulative.shape[-1] - 1)
    return picks.squeeze(-1), order.gather(-1, picks).squeeze(-1)


def nucleus_sample(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Inverse-CDF draw from softmax(logits / T) restricted to the smallest set of mass >= top_p.

    A row whose nucleus lies inside its NUCLEUS_CANDIDATES most likely tokens (``topk``), with no two equal
    probabilities among them up to the first token left out, draws from those: its nucleus tokens then have a
    unique order, the same as in the full sort, and the cumulative sums are the same prefix sums, so the draw is
    the full sort's bit for bit (tests/policy/test_sampling.py). The other rows (a tie, a wide nucleus, top_p = 1,
    a target at the very end) sort all probabilities, as before."""
    rows, vocabulary = logits.shape
    k = min(NUCLEUS_CANDIDATES, vocabulary)
    if top_p >= 1.0 or k == vocabulary:
        return _inverse_cdf(*sorted_nucleus(logits, temperature, top_p), uniforms)[1]
    probs = torch.softmax(logits.detach().float() / temperature, dim=-1)
    top, order = probs.topk(k, dim=-1)
    mass_before = top.cumsum(-1) - top
    inside = mass_before < top_p
    positions = torch.arange(k, device=top.device).unsqueeze(0)
    size = torch.where(inside, positions, -1).max(-1).values + 1  # the candidates up to the last one inside
    ties = torch.cat([top[:, 1:] == top[:, :-1], torch.zeros((rows, 1), dtype=torch.bool)], dim=-1)
    up_to_first_out = positions <= size.unsqueeze(-1)
    usable = (mass_before[:, -1] >= top_p + MASS_MARGIN) & ~(ties & up_to_first_out).any(-1)
    picks, tokens = _inverse_cdf(top * inside, order, uniforms)
    usable &= picks < size  # a target at the cumulative's very end: the full sort's last token (clamped)
    redo = torch.nonzero(~usable).flatten()
    if len(redo):
        redone = sorted_nucleus(logits[redo], temperature, top_p)
        tokens[redo] = _inverse_cdf(*redone, uniforms[redo.to(uniforms.device)])[1]
    return tokens


def _distinct(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(the distinct prompts in order of first appearance, each row's index among them)."""
    first: dict[tuple[int, ...], int] = {}
    rows = [first.setdefault(tuple(p), len(first)) for p in prompts]
    return [list(p) for p in first], rows


def _prefill(model, prompts: list[list[int]], pad_id: int):
    """Run each distinct prompt once; return, per row, (last logits [B, V], cache, attention mask, last
    positions [B, 1]): the distinct prompts' cache is expanded to the rows (a group's prompt runs once for all
    its continuations, an oracle batch's prompts once each)."""
    device = next(model.parameters()).device
    distinct, rows = _distinct(prompts)
    if len(distinct) == 1:  # a group: no padding
        ids = torch.tensor(distinct, device=device)
        mask = torch.ones_like(ids)
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        positions = torch.full((1, 1), ids.shape[1] - 1, device=device)
    else:
        width = max(len(p) for p in distinct)
        input_ids = torch.full((len(distinct), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(distinct), width), dtype=torch.long)
        for row, ids in enumerate(distinct):  # left padding: every row's next token is at the end
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            mask[row, width - len(ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp_(min=0)
        out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        positions = positions[:, -1:]
    index = torch.tensor(rows, device=device)
    out.past_key_values.batch_select_indices(index)
    return out.logits[:, -1, :][index], out.past_key_values, mask[index], positions[index]


@torch.no_grad()
def _sample_batch(model, prompts, generators, temperature, top_p, max_new_tokens, eos_ids, pad_id):
    """Continuations of ``prompts`` (row i drawing from ``generators[i]``). A row leaves the batch (its cache
    rows dropped) at the step it samples an EOS, so later steps compute only the rows still running."""
    device = next(model.parameters()).device
    logits, cache, mask, positions = _prefill(model, prompts, pad_id)
    eos = torch.tensor(eos_ids, device=device)
    outputs = [[] for _ in prompts]
    running = list(range(len(prompts)))  # the original rows of the batch's rows, in order
    for step in range(max_new_tokens):
        uniforms = torch.tensor([torch.rand(1, generator=generators[row]).item() for row in running])
        tokens = nucleus_sample(logits, uniforms, temperature, top_p)
        for row, token in zip(running, tokens.tolist()):
            outputs[row].append(token)
        if step == max_new_tokens - 1:
            break
        going = ~torch.isin(tokens, eos)
        if not bool(going.all()):
            if not bool(going.any()):
                break
            keep = torch.nonzero(going).flatten()
            running = [running[i] for i in keep.tolist()]
            cache.batch_select_indices(keep)
            tokens, mask, positions = tokens[keep], mask[keep], positions[keep]
        positions = positions + 1
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        out = model(
            input_ids=tokens.unsqueeze(-1),
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]
    return outputs


class Sampler(Protocol):
    """What the runs ask of a sampling backend (``policy.sampler_backends.SAMPLERS`` builds one per run):
    sample j of a request draws from random stream (*key, j); a continuation is its token ids, a sampled EOS kept
    at the end."""

    settings: SamplingSettings

    def iter_samples(self, requests: list[Request]) -> Iterator[tuple[int, list[int]]]:
        """(request position, continuation) for every sample (the oracle run writes a prompt's line when its last
        sample comes)."""

    def sample(self, requests: list[Request]) -> list[list[list[int]]]:
        """Per request, its n continuations in order (the tracecov run's groups)."""


def hf_sampler(config, model, settings: SamplingSettings, batch_size: int, requests_per_call: int = 1) -> HFSampler:
    """--backend hf's factory (``policy.sampler_backends.SAMPLERS``): batches of ``batch_size`` sequences of
    ``model`` across requests."""
    return HFSampler(model, settings, batch_size)


@dataclass
class HFSampler:
    """The seeded HF sampler (``Sampler``; ``vllm_sampler.VLLMSampler`` is the other backend).

    Rows of all requests are sampled in batches of ``batch_size`` sequences that may cross request
    boundaries (a caller that wants one batch per prompt makes one call per prompt)."""

    model: object
    settings: SamplingSettings
    batch_size: int = 64

    def iter_samples(self, requests: list[Request]) -> Iterator[tuple[int, list[int]]]:
        """(request position, continuation) for every sample, in order, one batch at a time."""
        rows = [(position, ids, (*key, j)) for position, (ids, n, key) in enumerate(requests) for j in range(n)]
        s = self.settings
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            generators = [torch.Generator().manual_seed(stream_seed(*key)) for _, _, key in batch]
            continuations = _sample_batch(
                self.model,
                [ids for _, ids, _ in batch],
                generators,
                s.temperature,
                s.top_p,
                s.max_new_tokens,
                list(s.eos_ids),
                s.pad_id,
            )
            yield from ((position, c) for (position, _, _), c in zip(batch, continuations))

    def sample(self, requests: list[Request]) -> list[list[list[int]]]:
        """Per request, its n continuations (token ids, a sampled EOS kept)."""
        return collect(self.iter_samples(requests), len(requests))


def collect(pairs, count: int) -> list[list[list[int]]]:
    """[(request position, continuation), ...] -> per request, its continuations in order."""
    out = [[] for _ in range(count)]
    for position, continuation in pairs:
        out[position].append(continuation)
    return out


def decode(tokenizer, continuations: list[list[int]]) -> list[str]:
    """Texts of the continuations without special tokens."""
    return tokenizer.batch_decode(continuations, skip_special_tokens=True)
