"""GRPO with TRL's ``GRPOTrainer`` from the VERL inputs: parquet rows, the reward file, the fixed-budget batch sizes.

Mapping to the VERL launcher (grpo_mse/training/budget.py gives the numbers):
- one VERL step = BUDGET sequences = BUDGET/K prompts x K samples (``generation_batch_size``),
  split into four updates of BUDGET/4 sequences (``per_device_train_batch_size``,
  ``steps_per_generation=4``), one pass over them (``num_iterations=1``), for BUDGET/(8K) epochs;
- std-normalised group advantages (``scale_rewards="group"``; ``"none"`` for the unnormalised one),
  no KL (``beta=0``), clip 0.2, token-mean over each update (``loss_type="dapo"``), AdamW with
  VERL's weight decay 0.01, constant learning rate, gradient clipping 1.0;
- the reward function is loaded by path and name as VERL does (``compute_score`` of
  Policy_Optimization/reward.py, rule chosen by ``data_source``).

Metrics are logged per VERL step under VERL's names (``critic/score/mean``,
``val-core/<data_source>/acc/mean@1`` from greedy decoding of the validation file before training,
every ``test_freq`` steps and at the end), as VERL console lines (``step:N - name:value - ...``)
and to wandb, so grpo_mse.training.logs collects TRL and VERL runs alike.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from grpo_mse.errors import InputError
from grpo_mse.rewards.rules import check_answers
from grpo_mse.tables.inputs import load_rows
from grpo_mse.training.budget import budget_settings

UPDATES_PER_STEP = 4  # VERL: ppo_mini_batch_size = train_batch_size / 4
TRL_TO_VERL = {
    "reward": "critic/score/mean",
    "loss": "actor/pg_loss",
    "grad_norm": "actor/grad_norm",
    "learning_rate": "actor/lr",
    "entropy": "actor/entropy",
    "clip_ratio/region_mean": "actor/pg_clipfrac",
    "completions/mean_length": "response_length/mean",
    "completions/clipped_ratio": "response_length/clip_ratio",
}


def verl_rows(path: str) -> list[dict]:
    """VERL parquet rows (read by the shared table loader) as TRL rows: chat prompt, data_source, ground truth. A
    ground truth that the row's reward rule can never match is refused (DataError naming the row): it would score 0."""
    rows = load_rows(path)
    check_answers(rows, path)
    return [
        {
            "prompt": chat_messages(row["prompt"]),
            "data_source": str(row.get("data_source", "")),
            "ground_truth": str(row["ground_truth"]),
        }
        for row in rows
    ]


def chat_messages(prompt) -> list[dict]:
    """A message list with string roles and contents (a plain string becomes one user message)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]


def load_reward(path: str, name: str = "compute_score"):
    """The reward function ``name`` of the file ``path`` (as VERL's custom_reward_function loads it)."""
    spec = importlib.util.spec_from_file_location("grpo_custom_reward", path)
    if spec is None or not os.path.isfile(path):
        raise InputError(f"reward file {path} not found")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise InputError(f"reward file {path} has no function {name}")
    return getattr(module, name)


def trl_reward(compute_score):
    """A TRL reward function (batch of completions) that scores each with ``compute_score`` by ``data_source``."""

    def acc(prompts, completions, data_source, ground_truth, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [
            float(compute_score(data_source=d, solution_str=t, ground_truth=g))
            for d, t, g in zip(data_source, texts, ground_truth)
        ]

    return acc


def prompt_tokens(row: dict, tokenizer) -> int:
    """Tokens of the row's chat-formatted prompt with the generation prompt (what the policy is given)."""
    ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
    return len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def fit_prompt_length(train_rows: list[dict], val_rows: list[dict], tokenizer, max_prompt_length: int, val_file: str):
    """(the training rows whose prompt fits ``max_prompt_length`` tokens, how many were dropped): longer training
    prompts are dropped, as VERL's filter_overlong_prompts does, with a warning line that counts them. A validation
    prompt that does not fit is refused (InputError) instead: dropping it would measure held-out accuracy on the
    part of the validation file that fits, a subset of short prompts that differs between settings."""
    limit = f"--max_prompt_length {max_prompt_length}"
    val_long = [n for n in (prompt_tokens(row, tokenizer) for row in val_rows) if n > max_prompt_length]
    if val_long:
        raise InputError(
            f"{len(val_long)} of {len(val_rows)} validation prompts in {val_file} are longer than {limit} tokens "
            f"(the longest has {max(val_long)} tokens); held-out accuracy would be measured on the "
            f"{len(val_rows) - len(val_long)} that fit: raise MAX_PROMPT_LENGTH to {max(val_long)} or remove them"
        )
    lengths = [prompt_tokens(row, tokenizer) for row in train_rows]
    kept = [row for row, n in zip(train_rows, lengths) if n <= max_prompt_length]
    if not kept:
        raise InputError(f"no training prompt fits {limit} (the shortest has {min(lengths)} tokens)")
    dropped = len(train_rows) - len(kept)
    if dropped:
        print(
            f"warning: {dropped} of {len(train_rows)} training prompts are longer than {limit} tokens (the longest "
            f"has {max(lengths)}) and are dropped, as VERL's filter_overlong_prompts does; {len(kept)} remain "
            f"(raise MAX_PROMPT_LENGTH to {max(lengths)} to keep them)",
            file=sys.stderr,
            flush=True,
        )
    return kept, dropped


def steps_per_epoch(n_train: int, prompts_per_step: int) -> int:
    """Whole steps in one pass over ``n_train`` rows: TRL's RepeatSampler and VERL's train dataloader
    (``drop_last=True``) both drop the last incomplete batch of prompts."""
    return n_train // prompts_per_step


def grpo_config(args, n_train: int):
    """The GRPOConfig of one run (``args``: the trl_train flags)."""
    import torch
    from trl import GRPOConfig

    settings = budget_settings(args.group_size, args.budget)
    if n_train < settings["train_batch_size"]:
        raise InputError(
            f"{n_train} training rows but {settings['train_batch_size']} prompts per step "
            f"(budget {args.budget} / K {args.group_size}): use more rows or a smaller budget"
        )
    if getattr(args, "adaptive_k_every", 0) and n_train < args.budget:
        raise InputError(
            f"{n_train} training rows but adaptive K draws {args.budget} distinct prompts per step (the budget, "
            f"of which BUDGET/K are used): use more rows or a smaller budget"
        )
    updates = UPDATES_PER_STEP * steps_per_epoch(n_train, settings["train_batch_size"]) * settings["total_epochs"]
    return GRPOConfig(
        output_dir=args.output_dir,
        run_name=args.experiment_name,
        seed=args.seed,
        data_seed=args.seed,
        # fixed budget: BUDGET sequences per generation, four updates of BUDGET/4, one pass
        num_generations=args.group_size,
        per_device_train_batch_size=args.budget // UPDATES_PER_STEP,
        gradient_accumulation_steps=1,
        steps_per_generation=UPDATES_PER_STEP,
        num_iterations=1,
        num_train_epochs=settings["total_epochs"],
        max_steps=args.max_steps * UPDATES_PER_STEP if args.max_steps else updates,
        # VERL's GRPO objective and optimiser
        scale_rewards="group" if args.norm_adv_by_std else "none",
        loss_type="dapo",
        beta=0.0,
        epsilon=0.2,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        weight_decay=0.01,
        max_grad_norm=1.0,
        # sampling as VERL's rollout defaults
        max_completion_length=args.max_response_length,
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        shuffle_dataset=True,
        remove_unused_columns=False,
        # plumbing: logging is ours (VERL names), checkpoints only at the end
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        logging_steps=UPDATES_PER_STEP,
        save_strategy="no",
        report_to="none",
        disable_tqdm=False,
        log_completions=False,
    )


def greedy_accuracy(model, tokenizer, rows, compute_score, max_new_tokens: int, batch_size: int = 64) -> dict:
    """``{"val-core/<data_source>/acc/mean@1": mean}``: greedy decoding of ``rows`` (VERL's validation default)."""
    import torch

    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    was_training = model.training
    model.eval()
    scores: dict[str, list[float]] = {}
    try:
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                batch = rows[start : start + batch_size]
                texts = [
                    tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
                    for r in batch
                ]
                enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
                out = model.generate(
                    **enc,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    top_k=None,
                    top_p=None,
                    temperature=None,
                    pad_token_id=tokenizer.pad_token_id,
                )
                answers = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
                for row, answer in zip(batch, answers):
                    score = compute_score(
                        data_source=row["data_source"], solution_str=answer, ground_truth=row["ground_truth"]
                    )
                    scores.setdefault(row["data_source"], []).append(float(score))
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return {f"val-core/{source}/acc/mean@1": sum(v) / len(v) for source, v in scores.items()}


def verl_metrics(logs: dict) -> dict:
    """TRL's log entries under VERL's metric names (the rest kept under ``trl/``)."""
    metrics = {}
    for key, value in logs.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics[TRL_TO_VERL.get(key, f"trl/{key}")] = float(value)
    if "critic/score/mean" in metrics:
        metrics["critic/rewards/mean"] = metrics["critic/score/mean"]  # no KL in the reward
    return metrics


def console_line(step: int, metrics: dict) -> str:
    """One VERL console line: ``step:N - name:value - ...``."""
    return f"step:{step} - " + " - ".join(f"{k}:{v:.6g}" for k, v in sorted(metrics.items()))
