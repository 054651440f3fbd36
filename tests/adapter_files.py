"""LoRA adapter folders for the tests: a small random adapter on the tiny policy, naming any base."""

from __future__ import annotations

import json
import os

import torch
from conftest import BUILTIN_POLICY


def write_adapter(out_dir, base: str, seed: int = 0) -> str:
    """A rank-4 LoRA of the tiny policy's attention and MLP with random (nonzero) weights, naming ``base``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(BUILTIN_POLICY, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(out_dir)
    path = os.path.join(out_dir, "adapter_config.json")
    with open(path, encoding="utf-8") as handle:
        adapter_config = json.load(handle)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({**adapter_config, "base_model_name_or_path": base}, handle)
    return str(out_dir)
