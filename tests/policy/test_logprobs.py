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


# --- mutation survivors, part A ---


def _nucleus_by_hand(row: list[float], temperature: float, top_p: float, target: int | None) -> list[float]:
    """log q over one step's vocabulary, from the definition: the smallest most-likely set of mass >= top_p
    (plus the sampled target), renormalised; FAR outside."""
    import math

    from grpo_mse.policy.logprobs import FAR

    scaled = [x / temperature for x in row]
    top = max(scaled)
    log_z = top + math.log(sum(math.exp(x - top) for x in scaled))
    logp = [x - log_z for x in scaled]
    keep, mass = set(), 0.0
    for index in sorted(range(len(row)), key=lambda i: -logp[i]):
        if mass >= top_p:
            break
        keep.add(index)
        mass += math.exp(logp[index])
    if target is not None:
        keep.add(target)
    log_mass = math.log(sum(math.exp(logp[i]) for i in keep))
    return [logp[i] - log_mass if i in keep else FAR for i in range(len(row))]


def test_token_log_probs_renormalise_over_the_nucleus_plus_the_sampled_token():
    """[B, T, V] logits: each step's nucleus (top_p 0.7 at T 0.5), widened by its own target, against the rule
    computed by hand; the targets outside their nucleus get a finite log q, the other outsiders FAR."""
    from grpo_mse.policy.logprobs import token_log_probs

    logits = torch.tensor(
        [
            [[2.0, 1.0, 0.0, -1.0], [0.0, 0.3, 1.5, -0.2]],
            [[-1.0, 0.5, 0.4, 2.5], [1.0, 1.2, -3.0, 0.1]],
        ]
    )
    targets = torch.tensor([[3, 0], [0, 2]])
    for given in (targets, None):
        got = token_log_probs(logits, 0.5, 0.7, given)
        expected = [
            [
                _nucleus_by_hand(logits[b, t].tolist(), 0.5, 0.7, None if given is None else int(given[b, t]))
                for t in range(2)
            ]
            for b in range(2)
        ]
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, torch.tensor(expected), atol=1e-5, rtol=1e-5)
    assert (token_log_probs(logits, 0.5, 0.7, targets).gather(-1, targets.unsqueeze(-1)) > -100).all()


def test_token_log_probs_at_top_p_one_is_the_plain_log_softmax_and_widens_half_precision():
    """top_p = 1 (the default) is log_softmax(logits / T) exactly, even for a token whose float32 probability
    underflows to 0 (a nucleus would drop it); bf16 logits come back float32, float64 stays float64."""
    from grpo_mse.policy.logprobs import token_log_probs

    logits = torch.tensor([[0.0, -200.0, 1.0], [3.0, 2.0, -150.0]])
    expected = torch.log_softmax(logits / 0.8, dim=-1)
    assert torch.equal(token_log_probs(logits, 0.8, 1.0), expected)
    assert torch.equal(token_log_probs(logits, 0.8), expected)
    half = logits.to(torch.bfloat16)
    widened = token_log_probs(half, 0.8)
    assert widened.dtype == torch.float32
    assert torch.equal(widened, torch.log_softmax(half.float() / 0.8, dim=-1))
    assert token_log_probs(logits.double(), 0.8).dtype == torch.float64


def _top1_by_hand(model, prompt, tokens, temperature):
    """Sequence log q at top_p -> 0: each step's nucleus is its most likely token plus the sampled one."""
    ids = torch.tensor([prompt + tokens])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].double() / temperature, -1)
    total = 0.0
    for step, token in enumerate(tokens):
        best = int(logp[step].argmax())
        kept = logp[step, [best, token]] if best != token else logp[step, [token]]
        total += float(logp[step, token] - torch.logsumexp(kept, 0))
    return total


def test_sequence_logprobs_with_a_tiny_nucleus_keep_the_sampled_tokens(random_lm):
    """top_p 0.01: the nucleus is the top token, so a sampled token outside it is renormalised against the top
    token and itself (never FAR); padded rows, pad id 3 and a dropped final EOS as documented."""
    prompt = [5, 6, 7]
    continuations = [[9, 10, 1], [11], [12, 13, 14, 2]]
    with torch.no_grad():
        got = sequence_logprobs(
            random_lm, prompt, continuations, eos_ids=[1, 2], pad_id=3, include_eos=False, temperature=0.7, top_p=0.01
        )
        expected = [_top1_by_hand(random_lm, prompt, c[:-1] if c[-1] in (1, 2) else c, 0.7) for c in continuations]
    assert got.tolist() == pytest.approx(expected, abs=1e-4)
    assert got.min() < -0.01  # some sampled token lies outside its one-token nucleus


def test_prompt_logits_are_skipped_from_an_output_layer_of_exactly_the_threshold(random_lm, monkeypatch):
    from grpo_mse.policy import logprobs

    weights = random_lm.get_output_embeddings().weight.numel()
    monkeypatch.setattr(logprobs, "SKIP_PROMPT_LOGITS_MIN", weights)
    assert logprobs.prompt_logits_skipped(random_lm, [5, 6, 7]) == 2
    monkeypatch.setattr(logprobs, "SKIP_PROMPT_LOGITS_MIN", weights + 1)
    assert logprobs.prompt_logits_skipped(random_lm, [5, 6, 7]) == 0


class _Tokenizer:
    """Characters as token ids: enough for prompt_ids and decode."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) - ord("a") + 4 for c in text]}

    def batch_decode(self, continuations, skip_special_tokens=True):
        return ["".join(chr(t - 4 + ord("a")) for t in c) for c in continuations]


class _Source:
    """A sampler that records its requests and returns fixed continuations."""

    def __init__(self):
        self.requests = []

    def sample(self, requests):
        self.requests.append(requests)
        return [[[4 + j, 5 + j] for j in range(count)] for _, count, _ in requests]


def test_prompt_sampler_draws_from_its_source_with_its_seed_and_batch_size(random_lm):
    from grpo_mse.policy.logprobs import PromptSampler
    from grpo_mse.policy.sampling import SamplingSettings

    settings = SamplingSettings((1,), 0)
    assert PromptSampler(random_lm, _Tokenizer(), settings, gen_bs=3, seed=0).source.batch_size == 3
    source = _Source()
    sampler = PromptSampler(random_lm, _Tokenizer(), settings, gen_bs=3, seed=11, source=source)
    prompt, continuations, texts = sampler.draw({"prompt": "bcd"}, (2, 5), 2)
    assert source.requests == [[([5, 6, 7], 2, (11, 2, 5))]]
    assert (prompt, continuations, texts) == ([5, 6, 7], [[4, 5], [5, 6]], ["ab", "bc"])


@pytest.mark.parametrize("shared_prompt", [True, False])
def test_prompt_sampler_scores_with_the_runs_settings(random_lm, shared_prompt):
    """logprob_fn scores with the settings' temperature, pad id and EOS, the sampler's include_eos, and top_p only
    for score_distribution "sampling"; shared_prompt picks one packed row (the prompt once) or K padded rows
    (include_eos follows shared_prompt here, to see both)."""
    from grpo_mse.policy.logprobs import PromptSampler
    from grpo_mse.policy.sampling import SamplingSettings

    prompt, continuations = [5, 6, 7], [[9, 10, 1], [11], [12, 13, 14, 2]]
    settings = SamplingSettings((1, 2), 3, temperature=0.7, top_p=0.01)
    rows = []
    hook = random_lm.register_forward_hook(
        lambda module, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        with torch.no_grad():
            for distribution, top_p in (("sampling", 0.01), ("model", 1.0)):
                sampler = PromptSampler(
                    random_lm,
                    None,
                    settings,
                    2,
                    0,
                    include_eos=shared_prompt,
                    shared_prompt=shared_prompt,
                    source=_Source(),
                    score_distribution=distribution,
                )
                got = sampler.logprob_fn(prompt)(continuations)
                expected = sequence_logprobs(
                    random_lm,
                    prompt,
                    continuations,
                    eos_ids=[1, 2],
                    pad_id=3,
                    include_eos=shared_prompt,
                    temperature=0.7,
                    top_p=top_p,
                )
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    finally:
        hook.remove()
    assert rows[0] == (1 if shared_prompt else 3)


# --- mutation survivors, part B ---
# The prompt-sharing paths (packed sequence, repeated prompt cache, the dispatcher between them) checked against
# the plain padded batch at the edges: default arguments, a final EOS kept, a nucleus that misses a sampled token,
# width-1 and width-2 groups, padding, a float64 model, a model whose config turns its cache off.

_GROUP = [[9, 10, 1], [11], [12, 13, 14, 15, 2], [3, 4]]  # EOS endings (1, 2), different lengths, padding


def _forwards(model):
    """A list that grows by one per forward pass of ``model`` (and the hook, to remove)."""
    calls = []
    return calls, model.register_forward_hook(lambda module, inputs, output: calls.append(1))


@pytest.mark.parametrize("packed", [True, False])
def test_shared_prompt_dispatch_passes_every_setting_on(random_lm, monkeypatch, packed):
    """Packed (one forward pass) where packing applies, else the cache (two); either way the values of
    ``sequence_logprobs`` with its defaults (the final EOS counted) and with T, top_p and the EOS left out."""
    from grpo_mse.policy import logprobs

    if not packed:
        monkeypatch.setattr(logprobs, "PACKED_MAX_TOKENS", 0)
    prompt = [5, 6, 7, 8]
    calls, hook = _forwards(random_lm)
    try:
        values = logprobs.shared_prompt_logprobs(random_lm, prompt, _GROUP, eos_ids=[1, 2], pad_id=0)
    finally:
        hook.remove()
    assert len(calls) == (1 if packed else 2)
    expected = sequence_logprobs(random_lm, prompt, _GROUP, eos_ids=[1, 2], pad_id=0)
    torch.testing.assert_close(values.detach(), expected.detach(), atol=1e-5, rtol=1e-5)
    settings = {"eos_ids": [1, 2], "pad_id": 0, "include_eos": False, "temperature": 0.7, "top_p": 0.6}
    values = logprobs.shared_prompt_logprobs(random_lm, prompt, _GROUP, **settings)
    expected = sequence_logprobs(random_lm, prompt, _GROUP, **settings)
    torch.testing.assert_close(values.detach(), expected.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", ["packed", "cached"])
def test_prompt_paths_keep_defaults_and_sampled_tokens_outside_the_nucleus(random_lm, path):
    """Called with their defaults (T = 1, top_p = 1, the final EOS counted) both paths give the padded batch's
    values; with a tight nucleus every sampled token keeps a finite log q (none gets ``FAR``)."""
    from grpo_mse.policy import logprobs

    function = getattr(logprobs, f"{path}_prompt_logprobs")
    prompt = [5, 6, 7]
    values = function(random_lm, prompt, _GROUP, eos_ids=[1, 2], pad_id=0)
    expected = sequence_logprobs(random_lm, prompt, _GROUP, eos_ids=[1, 2], pad_id=0)
    torch.testing.assert_close(values.detach(), expected.detach(), atol=1e-5, rtol=1e-5)
    tight = function(random_lm, prompt, _GROUP, eos_ids=[1, 2], pad_id=0, top_p=0.2)
    expected = sequence_logprobs(random_lm, prompt, _GROUP, eos_ids=[1, 2], pad_id=0, top_p=0.2)
    assert tight.detach().abs().max() < 1e3
    torch.testing.assert_close(tight.detach(), expected.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("group", [[[4], [7], [1]], [[4, 1], [7], [3, 2]]])
def test_cached_prompt_path_with_one_or_two_token_continuations(random_lm, monkeypatch, group):
    """Width 1 (no second pass) and width 2 (one fed token), also when the model's config turns its cache off."""
    from grpo_mse.policy.logprobs import cached_prompt_logprobs

    monkeypatch.setattr(random_lm.config, "use_cache", False)
    prompt = [5, 6, 7]
    values = cached_prompt_logprobs(random_lm, prompt, group, eos_ids=[1, 2], pad_id=0, include_eos=True)
    manual = torch.stack([_manual(random_lm, prompt, c) for c in group])
    torch.testing.assert_close(values.detach(), manual.detach(), atol=1e-5, rtol=1e-5)


def test_packed_path_on_a_float64_model_with_the_eager_mask(random_lm):
    """The additive mask and the totals take the model's dtype (float64: its mask minimum has no float32 value)."""
    import copy

    from grpo_mse.policy.logprobs import packed_prompt_logprobs

    model = copy.deepcopy(random_lm).double()
    model.config._attn_implementation = "eager"
    prompt = [5, 6, 7]
    values = packed_prompt_logprobs(model, prompt, _GROUP, eos_ids=[1, 2])
    assert values.dtype == torch.float64
    expected = sequence_logprobs(model, prompt, _GROUP, eos_ids=[1, 2], pad_id=0)
    torch.testing.assert_close(values.detach(), expected.detach(), atol=1e-9, rtol=1e-9)


def test_packing_applies_at_its_limits_and_reads_configs_that_lack_attributes(monkeypatch):
    """The token limit and the sliding window are inclusive; a window counts unless ``use_sliding_window`` is
    False (a config without that flag, e.g. Mistral's, uses its window); a config that names no attention
    implementation or no window is read without error."""
    from types import SimpleNamespace

    from grpo_mse.policy import logprobs

    def model(**config):
        return SimpleNamespace(config=SimpleNamespace(**config))

    prompt, group = [5, 6, 7], [[1, 2, 3], [4]]  # packed: 3 + 2 + 0 = 5 tokens; positions reach 3 + 3 = 6
    monkeypatch.setattr(logprobs, "PACKED_MAX_TOKENS", 5)
    assert logprobs.packing_applies(model(_attn_implementation="sdpa"), prompt, group)
    monkeypatch.setattr(logprobs, "PACKED_MAX_TOKENS", 4)
    assert not logprobs.packing_applies(model(_attn_implementation="sdpa"), prompt, group)
    monkeypatch.undo()
    assert not logprobs.packing_applies(model(), prompt, group)
    assert logprobs.packing_applies(model(_attn_implementation="eager", sliding_window=6), prompt, group)
    assert not logprobs.packing_applies(model(_attn_implementation="eager", sliding_window=5), prompt, group)
    off = model(_attn_implementation="eager", use_sliding_window=False, sliding_window=2)
    assert logprobs.packing_applies(off, prompt, group)
    on = model(_attn_implementation="eager", use_sliding_window=True, sliding_window=2)
    assert not logprobs.packing_applies(on, prompt, group)
