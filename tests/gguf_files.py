"""Tiny GGUF files written by the tests themselves (the ``gguf`` package's writer), from small HF model folders.

The layout follows llama.cpp's conventions, which transformers' GGUF reader inverts: tensors named
``token_embd`` / ``blk.N.attn_q`` / ... / ``output_norm``, and for the ``llama`` architecture the rows of the query
and key projections permuted per head (llama.cpp's rotary layout; transformers undoes it on load, so a test that
compares logits catches a missing or wrong permutation). Weights are stored as float32, so a loaded model equals
its source exactly.
"""

from __future__ import annotations

import json
import os

import numpy as np

# HF parameter name (inside model.layers.N.) -> GGUF tensor name (inside blk.N.)
LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_TENSORS = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}


def rotary_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's order of a query/key projection's rows: per head, the two rotary halves interleaved."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def gguf_name(hf_name: str) -> str | None:
    if hf_name in TOP_TENSORS:
        return TOP_TENSORS[hf_name]
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"]:
        return f"blk.{parts[2]}.{LAYER_TENSORS['.'.join(parts[3:])]}"
    return None


def write_gguf(model_dir: str, out_path: str, *, bos: int | None, eos: int, pad: int | None, name: str = "tiny"):
    """Write ``model_dir`` (a qwen2 or llama HF folder with a byte-level BPE tokenizer.json) as a GGUF file whose
    metadata names ``bos``/``eos``/``pad`` as the special tokens."""
    import gguf
    from safetensors.numpy import load_file

    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as handle:
        tokenizer = json.load(handle)
    arch = config["model_type"]
    assert arch in ("qwen2", "llama"), arch
    writer = gguf.GGUFWriter(out_path, arch)
    writer.add_name(name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(float((config.get("rope_parameters") or {}).get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    if arch == "llama":
        writer.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
    vocab = sorted(tokenizer["model"]["vocab"].items(), key=lambda item: item[1])
    special = {t["content"] for t in tokenizer["added_tokens"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if arch == "qwen2" else "smollm")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types([3 if token in special else 1 for token, _ in vocab])  # 3: control, 1: normal
    merges = tokenizer["model"]["merges"]
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    if bos is not None:
        writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    if pad is not None:
        writer.add_pad_token_id(pad)
    writer.add_add_bos_token(False)
    template = os.path.join(model_dir, "chat_template.jinja")
    if os.path.isfile(template):
        with open(template, encoding="utf-8") as handle:
            writer.add_chat_template(handle.read())
    weights = load_file(os.path.join(model_dir, "model.safetensors"))
    for hf_name, array in weights.items():
        target = gguf_name(hf_name)
        if target is None:
            continue
        array = np.ascontiguousarray(array.astype(np.float32))
        if arch == "llama" and target.endswith("attn_q.weight"):
            array = rotary_permute(array, config["num_attention_heads"])
        elif arch == "llama" and target.endswith("attn_k.weight"):
            array = rotary_permute(array, config["num_key_value_heads"])
        writer.add_tensor(target, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path


def tiny_llama_folder(tokenizer_dir: str, out_dir: str, seed: int = 0) -> str:
    """A random 2-layer Llama (grouped-query attention, as SmolLM2) with ``tokenizer_dir``'s tokenizer."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with open(os.path.join(tokenizer_dir, "config.json"), encoding="utf-8") as handle:
        vocab_size = json.load(handle)["vocab_size"]
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger weights than the init's, so a wrong permutation changes the logits visibly
        for parameter in model.parameters():
            parameter.mul_(5.0)
    model.save_pretrained(out_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(tokenizer_dir, name), out_dir)
    return out_dir
