"""Tiny built-in causal LM ("built-in policy") so the project runs offline on a laptop.

A byte-level BPE tokenizer (Qwen2 layout, so transformers reloads it unchanged as
``Qwen2Tokenizer``) and a ~0.27M-parameter ``Qwen2ForCausalLM`` briefly trained, with
supervision on the answer tokens only, on arithmetic rows drawn with a seed disjoint from the
evaluation sets. Training stops early on purpose: the policy is only partly right, so the
per-prompt success probabilities V(x) spread over (0, 1).
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import DynamicCache, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.policy.loading import eos_token_ids
from grpo_mse.policy.sampling import HFSampler, SamplingSettings, decode
from grpo_mse.rewards.rules import row_reward
from grpo_mse.tables.inputs import prompt_ids
from studies.builders import defaults

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)

# Qwen2's pre-tokenizer split pattern (digits are always single tokens).
QWEN2_SPLIT_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TRAIN_DATA_SEED = 12345  # disjoint from the evaluation seeds (0, 1, ...)
DEFAULT_VOCAB_SIZE = 384
DEFAULT_STEPS = defaults.TINY_STEPS


def build_tokenizer(texts, vocab_size: int = DEFAULT_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` with Qwen2's normalizer, split regex and decoder."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Sorted input: the learned merges do not depend on the caller's order.
    tok.train_from_iterator(sorted(texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )


def build_model(
    vocab_size: int,
    hidden_size: int = 64,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    pad_token_id: int = 0,
    eos_token_id: int | None = None,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """A small fp32 ``Qwen2ForCausalLM`` (tied embeddings), initialised from ``seed``."""
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        dtype="float32",
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).float()


def training_rows(n: int = 40000, seed: int = TRAIN_DATA_SEED) -> list[dict]:
    """Half zero-shot, half few-shot rows (distinct problems) from a non-evaluation seed."""
    zero = make_rows(n // 2, seed=seed, style="zero_shot")
    few = make_rows(n - n // 2, seed=seed + 1, style="few_shot")
    return zero + few


def encode_example(tokenizer, row: dict) -> tuple[list[int], int]:
    """Token ids of chat prompt + ``"{target}<|im_end|>"`` and the prompt length.

    The target is ``row["target"]`` when the row has one, else the ground-truth answer.
    """
    prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target = row.get("target", row["ground_truth"])
    answer_ids = tokenizer(f"{target}{IM_END}", add_special_tokens=False)["input_ids"]
    return prompt_ids + answer_ids, len(prompt_ids)


def _collate(examples, pad_id: int):
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (ids, n_prompt) in enumerate(examples):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
        mask[i, : len(ids)] = 1
    return input_ids, mask, labels


def batch_loss(model, batch, pad_id: int, share_prefix: bool = True):
    """Mean answer-token loss of ``batch`` (a list of ``(ids, n_prompt)``).

    With ``share_prefix`` the token prefix common to all rows (the fixed instruction, and for
    few-shot prompts the five worked examples) runs once and its key/value cache is repeated
    over the batch: same loss and gradients as the plain forward pass, several times cheaper.
    """
    n_shared = 0
    if share_prefix:
        first, limit = batch[0][0], min(n for _, n in batch) - 1
        while n_shared < limit and all(ids[n_shared] == first[n_shared] for ids, _ in batch):
            n_shared += 1
    if n_shared == 0:
        input_ids, mask, labels = _collate(batch, pad_id)
        return model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    cache = DynamicCache(config=model.config)
    model.model(input_ids=torch.tensor([batch[0][0][:n_shared]]), past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(len(batch))
    input_ids, mask, labels = _collate([(ids[n_shared:], n - n_shared) for ids, n in batch], pad_id)
    mask = torch.cat([torch.ones(len(batch), n_shared, dtype=mask.dtype), mask], dim=1)
    out = model(input_ids=input_ids, attention_mask=mask, labels=labels, past_key_values=cache, use_cache=True)
    return out.loss


def lr_multiplier(step: int, steps: int, warmup: int, schedule: str = "cosine") -> float:
    """The learning rate's factor at ``step``: linear warmup, then cosine decay to 0 over ``steps`` (or constant)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def length_groups(encoded: list[tuple[list[int], int]]) -> list[list[tuple[list[int], int]]]:
    """The encoded rows split at the median prompt length (zero-shot and few-shot prompts apart: little padding)."""
    median = sorted(n for _, n in encoded)[len(encoded) // 2]
    groups = [[e for e in encoded if e[1] < median], [e for e in encoded if e[1] >= median]]
    return [g for g in groups if g]


def draw_batch(groups, step: int, rng: random.Random, batch_size: int) -> list[tuple[list[int], int]]:
    """Step ``step``'s batch: rows drawn with replacement from the groups in turn."""
    group = groups[step % len(groups)]
    return [group[rng.randrange(len(group))] for _ in range(batch_size)]


def train(
    model,
    tokenizer,
    rows,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    batch_size: int = 128,
    lr: float = 3e-3,
    warmup: int = 30,
    weight_decay: float = 0.01,
    log_every: int = 100,
    callback=None,
    schedule: str = "cosine",
) -> list[float]:
    """AdamW on the answer tokens only (linear warmup, then ``schedule``: cosine decay to 0 over ``steps``, or
    constant, so that the first s steps of a run equal a run of s steps); returns the per-step losses.

    Batches alternate between the short (zero-shot) and long (few-shot) half of the rows, split
    at the median prompt length, which keeps padding small. Batches are drawn with
    ``random.Random(seed)``; torch is seeded too.
    ``callback(step, model)``, if given, runs after every ``log_every`` steps.
    """
    torch.manual_seed(seed)
    rng = random.Random(seed)
    pad_id = tokenizer.pad_token_id
    groups = length_groups([encode_example(tokenizer, row) for row in rows])
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))

    if schedule not in ("cosine", "constant"):
        raise ValueError(f"unknown schedule {schedule!r}; choose cosine or constant")

    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda step: lr_multiplier(step, steps, warmup, schedule))
    model.train()
    losses, start = [], time.time()
    for step in range(steps):
        loss = batch_loss(model, draw_batch(groups, step, rng, batch_size), pad_id)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            recent = sum(losses[-log_every:]) / log_every
            print(f"step {step + 1}/{steps}  loss {recent:.3f}  {time.time() - start:.0f}s", flush=True)
            if callback is not None:
                callback(step + 1, model)
                model.train()
    model.eval()
    return losses


def tokenizer_texts(rows) -> list[str]:
    """Texts the BPE is trained on: role names, prompt contents and answers of every row."""
    texts = []
    for row in rows:
        for message in row["prompt"]:
            texts.extend([message["role"] + "\n", message["content"]])
        texts.extend(["assistant\n", str(row["ground_truth"])])
    return texts


def build_and_save(
    out_dir,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    n_train_rows: int = 40000,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    **train_kwargs,
):
    """Build tokenizer and model, train them from ``seed``, save both in HF format to ``out_dir``."""
    torch.manual_seed(seed)
    rows = training_rows(n_train_rows)
    tokenizer = build_tokenizer(tokenizer_texts(rows), vocab_size=vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    model = build_model(len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_id, seed=seed)
    train(model, tokenizer, rows, steps=steps, seed=seed, **train_kwargs)
    save_policy(model, tokenizer, out_dir)
    return model, tokenizer


def fine_tune_and_save(base_dir, out_dir, make_rows_for, seed: int, steps: int, lr: float, **train_kwargs):
    """Load the policy in ``base_dir``, train it on ``make_rows_for(tokenizer)`` from ``seed``, save to ``out_dir``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    rows = make_rows_for(tokenizer)
    train(model, tokenizer, rows, steps=steps, seed=seed, lr=lr, **train_kwargs)
    save_policy(model, tokenizer, out_dir)
    return model, tokenizer


def save_policy(model, tokenizer, out_dir) -> None:
    """Attach the sampling defaults (T=1, top-p 0.95, 32 new tokens) and save both in HF format to ``out_dir``."""
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_p=0.95,
        top_k=0,
        max_new_tokens=32,
        eos_token_id=eos_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)


def sample_answers(
    model,
    tokenizer,
    rows,
    n_samples: int = 32,
    prompts_per_batch: int = 8,
    seed: int = 0,
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_p: float = 0.95,
) -> tuple[list[list[str]], float]:
    """``n_samples`` answer texts per row, drawn by the project's seeded sampler (sample j of row i from
    stream (seed, i, j)), and the share of samples that ended with an EOS token."""
    model.eval()
    settings = SamplingSettings(
        tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, temperature, top_p, max_new_tokens
    )
    sampler = HFSampler(model, settings, prompts_per_batch * n_samples)
    requests = [(prompt_ids(tokenizer, row["prompt"]), n_samples, (seed, i)) for i, row in enumerate(rows)]
    continuations = sampler.sample(requests)
    ended = sum(bool(c) and c[-1] in settings.eos_ids for group in continuations for c in group)
    return [decode(tokenizer, group) for group in continuations], ended / max(1, len(rows) * n_samples)


def estimate_v(model, tokenizer, rows, n_samples: int = 32, **sampling) -> tuple[list[float], float]:
    """Monte-Carlo V(x) per row (share of ``n_samples`` answers with reward 1), and the EOS rate; ``sampling``:
    ``sample_answers``' prompts_per_batch, seed, max_new_tokens, temperature and top_p."""
    answers, eos_rate = sample_answers(model, tokenizer, rows, n_samples, **sampling)
    return share_correct(rows, answers), eos_rate


def share_correct(rows, answers: list[list[str]]) -> list[float]:
    """Per row, the share of its answer texts with reward 1 (a Monte-Carlo V(x))."""
    return [sum(row_reward(row, t) for t in texts) / len(texts) for row, texts in zip(rows, answers)]


def v_summary(values) -> str:
    """Mean, quantiles and the fraction of prompts with V in (0.05, 0.95), on one line."""
    v = torch.tensor(values, dtype=torch.float64)
    qs = torch.quantile(v, torch.tensor([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0], dtype=torch.float64))
    mid = ((v > 0.05) & (v < 0.95)).double().mean().item()
    q_text = " ".join(f"{q:.2f}" for q in qs.tolist())
    return f"mean {v.mean().item():.3f}  q[0,.1,.25,.5,.75,.9,1] {q_text}  frac V in (0.05,0.95) {mid:.2f}"
