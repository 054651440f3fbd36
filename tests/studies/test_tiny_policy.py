"""The shipped built-in policy (assets/tiny_policy): tokenizer round trip, chat template, EOS, model."""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import BUILTIN_POLICY

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.rewards.rules import last_integer
from studies.builders import tiny_policy as tp

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(BUILTIN_POLICY, "model.safetensors")),
    reason="assets/tiny_policy not built (python scripts/build_tiny_policy.py)",
)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(BUILTIN_POLICY)


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(BUILTIN_POLICY).eval()


@pytest.mark.parametrize("style", ["zero_shot", "few_shot"])
def test_prompts_round_trip_exactly(tokenizer, style):
    """Spaces and newlines survive the reload as Qwen2Tokenizer (byte-level BPE, Qwen2 split regex)."""
    for row in make_rows(100, seed=0, style=style):
        content = row["prompt"][0]["content"]
        ids = tokenizer(content, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == content
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    for answer in ("0", "-17", "1188", " 42\n", "The answer is 7."):
        assert tokenizer.decode(tokenizer(answer, add_special_tokens=False)["input_ids"]) == answer


def test_chat_template(tokenizer):
    messages = [{"role": "user", "content": "Solve.\n12 * 7 ="}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\nSolve.\n12 * 7 =<|im_end|>\n<|im_start|>assistant\n"
    closed = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": "84"}], tokenize=False)
    assert closed == "<|im_start|>user\nSolve.\n12 * 7 =<|im_end|>\n<|im_start|>assistant\n84<|im_end|>\n"
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids(tp.IM_START)


def test_special_token_ids(tokenizer, model):
    eos = tokenizer.convert_tokens_to_ids(tp.IM_END)
    pad = tokenizer.convert_tokens_to_ids(tp.PAD_TOKEN)
    assert tokenizer.eos_token == tp.IM_END and tokenizer.eos_token_id == eos
    assert tokenizer.pad_token_id == pad and pad != eos
    assert tokenizer(tp.IM_END, add_special_tokens=False)["input_ids"] == [eos]
    assert tokenizer.decode([eos, pad], skip_special_tokens=True) == ""
    gen = model.generation_config
    assert gen.eos_token_id == eos and gen.pad_token_id == pad and gen.do_sample
    assert model.config.eos_token_id == eos and model.config.pad_token_id == pad


def test_model_logits(tokenizer, model):
    n_params = sum(p.numel() for p in model.parameters())
    assert 2e5 < n_params < 2e6
    assert model.config.model_type == "qwen2" and model.dtype == torch.float32
    assert model.config.vocab_size == len(tokenizer)
    row = make_rows(1, seed=0)[0]
    text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()


def test_greedy_answer_is_an_integer_then_eos(tokenizer, model):
    """Trained format: a few digits, then <|im_end|> (so EOS ends the rollouts)."""
    rows = make_rows(8, seed=0, style="zero_shot")
    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, do_sample=False, max_new_tokens=8)
    for seq in out[:, enc["input_ids"].shape[1] :]:
        assert tokenizer.eos_token_id in seq.tolist()
        assert last_integer(tokenizer.decode(seq, skip_special_tokens=True)) is not None


def test_build_tokenizer_is_deterministic():
    texts = tp.tokenizer_texts(tp.training_rows(60))
    first, second = tp.build_tokenizer(texts), tp.build_tokenizer(list(reversed(texts)))
    assert first.get_vocab() == second.get_vocab()
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()


def test_builders_v_summary_is_the_oracle_runs_estimate(tmp_path, tokenizer, model):
    """estimate_v (the builders' summary) draws sample j of row i from stream (seed, i, j): on rows whose ids are
    their positions it equals calculate_oracle_v's V of the same seed and sampling settings, row by row. Its EOS
    rate counts sampled EOS tokens: every answer ends within 32 tokens, none within 1 (the answer's digits come
    first)."""
    from grpo_mse.config.gradient_evaluation import OracleConfig
    from grpo_mse.runs.oracle import run_oracle
    from grpo_mse.tables.outputs import read_complete_jsonl

    rows = make_rows(4, seed=0, style="zero_shot")
    table = tmp_path / "rows.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = {"model": BUILTIN_POLICY, "device": "cpu", "dtype": "fp32", "seed": 5, "top_p": 0.9}
    saved = run_oracle(OracleConfig(**common, dataset=str(table), n_oracle=12, out_dir=str(tmp_path / "v")))
    oracle = {r["id"]: r["V_oracle"] for r in read_complete_jsonl(saved.path)}
    values, eos_rate = tp.estimate_v(model, tokenizer, rows, n_samples=12, seed=5, top_p=0.9)
    assert values == [oracle[row["id"]] for row in rows] and 0 < sum(values) < len(rows)
    assert eos_rate == 1.0
    assert tp.estimate_v(model, tokenizer, rows, n_samples=4, max_new_tokens=1)[1] == 0.0
