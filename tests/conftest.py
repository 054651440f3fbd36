"""Shared fixtures: a tiny random Qwen2 model (no tokenizer needed) for engine-level tests."""

from __future__ import annotations

import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
BUILTIN_POLICY = os.path.join(ROOT, "assets", "tiny_policy")


@pytest.fixture(scope="session")
def random_lm():
    """A 2-layer Qwen2 with vocab 23, fp32, deterministic weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=23, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config).eval()
    return model


@pytest.fixture(scope="session")
def builtin_policy():
    """The shipped built-in policy (model, tokenizer); skips when it has not been built."""
    if not os.path.exists(os.path.join(BUILTIN_POLICY, "config.json")):
        pytest.skip("assets/tiny_policy not built (python scripts/build_tiny_policy.py)")
    from grpo_mse.modeling import load_policy

    return load_policy(BUILTIN_POLICY, "cpu", "fp32")
