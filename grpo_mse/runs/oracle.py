"""The oracle-value run: Monte Carlo V(x) = P(reward = 1 | x) per prompt, appended to a JSONL table.

Each line is the input row plus V_oracle, n_oracle, correct_count and a 95% Wilson interval,
written as soon as a prompt's samples are scored. The run's settings are saved beside the table
(``*.settings.json``); --resume continues the newest file whose settings are equal.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

from grpo_mse import cli
from grpo_mse import distributed as dist
from grpo_mse.gradients.config import OracleConfig
from grpo_mse.policy.loading import eos_token_ids, load_policy, model_basename_tag
from grpo_mse.policy.sampling import decode, row_generators, sample_continuations
from grpo_mse.rewards.rules import row_reward
from grpo_mse.tables.inputs import has_unique_ids, load_rows, oracle_settings, prompt_ids, row_keys
from grpo_mse.tables.outputs import (
    append_jsonl,
    read_complete_jsonl,
    timestamp,
    to_json,
    wilson_interval,
    write_atomic,
    write_json,
)
from grpo_mse.tables.resume import choose, claim, fingerprint, lock
from grpo_mse.tables.validate import check_answers, check_prompt_lengths, check_prompts, model_positions


def settings(config: OracleConfig) -> dict:
    """The run's RESULT_FIELDS, with the dataset as its content fingerprint (or hub id)."""
    return {**{name: getattr(config, name) for name in config.RESULT_FIELDS}, "dataset": fingerprint(config.dataset)}


def settings_path(path: str) -> str:
    return path[: -len(".jsonl")] + ".settings.json"


def read_settings(path: str) -> dict | None:
    """The saved settings of an oracle file, or None when missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def resumable(config: OracleConfig, current: dict) -> str | None:
    """The newest file in --out_dir with equal settings; None when there is none (a one-line refusal naming
    what differs when the newest file's settings differ)."""
    candidates = [(path, read_settings(settings_path(path)))
                  for path in sorted(glob.glob(os.path.join(glob.escape(config.out_dir), "oracle_v_n*.jsonl")),
                                     key=os.path.getmtime)]
    chosen = choose(candidates, current, config.RESULT_FIELDS)
    if chosen is None:
        print(f"note: nothing to resume in {config.out_dir}; starting a new file", file=sys.stderr)
    return chosen


def new_output(config: OracleConfig, current: dict) -> str:
    """A new timestamped file (``_2``, ... when the name is taken), created here beside its settings."""
    os.makedirs(config.out_dir, exist_ok=True)
    stem = claim(os.path.join(config.out_dir, f"oracle_v_n{config.n_oracle}_{model_basename_tag(config.model)}_"
                                              f"{timestamp()}"), ".jsonl")
    write_json(stem + ".settings.json", current)
    return stem + ".jsonl"


def sampled_texts(config: OracleConfig, model, tokenizer, ids, keys, todo, eos, vllm=None):
    """Yield (row position, decoded continuation) for n_oracle samples of each prompt, prompt by prompt.

    HF: batches of --batch_size sequences cross prompt boundaries; sample j of row i uses stream
    (seed, key_i, j). vLLM: --batch_size prompts per call, each with its own seed (seed, key_i).
    """
    if vllm is not None:
        for first in range(0, len(todo), config.batch_size):
            chunk = todo[first:first + config.batch_size]
            outputs = vllm.sample([(ids[i], config.n_oracle, (config.seed, keys[i])) for i in chunk],
                                  temperature=config.temperature, top_p=config.top_p,
                                  max_new_tokens=config.max_new_tokens, eos_ids=eos)
            for i, continuations in zip(chunk, outputs):
                yield from ((i, text) for text in decode(tokenizer, continuations))
        return
    items = [(i, j) for i in todo for j in range(config.n_oracle)]
    for first in range(0, len(items), config.batch_size):
        batch = items[first:first + config.batch_size]
        generators = [row_generators(config.seed, keys[i], count=1, start=j)[0] for i, j in batch]
        continuations = sample_continuations(
            model, [ids[i] for i, _ in batch], generators, temperature=config.temperature, top_p=config.top_p,
            max_new_tokens=config.max_new_tokens, eos_ids=eos, pad_id=tokenizer.pad_token_id,
            batch_size=config.batch_size)
        yield from ((i, text) for (i, _), text in zip(batch, decode(tokenizer, continuations)))


def run_oracle(config: OracleConfig) -> dict | None:
    """The whole run of calculate_oracle_v.py; on rank 0 returns {"path", "new", "total", "seconds"}."""
    rank, world, device = dist.init_from_env(config.device)
    rows = load_rows(config.dataset, config.split)[: config.limit]
    check_prompts(rows, config.dataset)
    check_answers(rows, config.dataset)
    keys = row_keys(rows)
    current = settings(config)
    path = resumable(config, current) if config.resume and rank == 0 else None
    model, tokenizer = load_policy(config.model, device, config.dtype, config.revision, config.trust_remote_code)
    ids = [prompt_ids(tokenizer, row["prompt"]) for row in rows]
    check_prompt_lengths([len(i) for i in ids], config.max_new_tokens, model_positions(model), config.dataset)
    eos = eos_token_ids(model, tokenizer)
    path = dist.broadcast_text((path or new_output(config, current)) if rank == 0 else "")
    shard_path = path if world == 1 else f"{path}.rank{rank}"
    run_lock = lock(shard_path)  # one writer per file, held until the run ends
    key_field = "id" if has_unique_ids(rows) else "row_index"
    done_keys = {rec.get(key_field) for p in {path, shard_path} for rec in read_complete_jsonl(p)}
    todo = [i for i in dist.shard(list(range(len(rows))), rank, world) if keys[i] not in done_keys]
    if done_keys:
        print(f"resuming {path}: {len(done_keys)} prompts already done", file=sys.stderr)
    os.makedirs(config.out_dir, exist_ok=True)
    correct = dict.fromkeys(todo, 0)
    remaining = dict.fromkeys(todo, config.n_oracle)
    sampled = sampled_texts(config, model, tokenizer, ids, keys, todo, eos, cli.make_vllm(config, device))
    start = time.time()
    bar = cli.progress(total=len(todo), desc="prompts", disable=rank > 0)
    for i, text in sampled:
        correct[i] += int(row_reward(rows[i], text))
        remaining[i] -= 1
        if remaining[i] == 0:
            low, high = wilson_interval(correct[i], config.n_oracle)
            extra = {"row_index": i} if key_field == "row_index" else {}
            append_jsonl(shard_path, {**rows[i], **extra, "V_oracle": correct[i] / config.n_oracle,
                                      "n_oracle": config.n_oracle, "correct_count": correct[i],
                                      "V_ci95_low": low, "V_ci95_high": high,
                                      "oracle_settings": oracle_settings(config, config.n_oracle)})
            bar.update(1)
    bar.close()
    dist.barrier()
    if rank == 0 and world > 1:
        merge_shards(path, world, keys, key_field)
    seconds = time.time() - start
    run_lock.close()
    dist.finish()
    return {"path": path, "new": len(todo), "total": len(rows), "seconds": seconds} if rank == 0 else None


def merge_shards(path: str, world: int, keys: list[int], key_field: str) -> None:
    """Fold the ranks' files into ``path`` in table order, atomically, and remove the shard files."""
    records = read_complete_jsonl(path)
    for rank in range(world):
        records += read_complete_jsonl(f"{path}.rank{rank}")
    position = {key: i for i, key in enumerate(keys)}
    records.sort(key=lambda r: position.get(r.get(key_field), len(keys)))
    write_atomic(path, "".join(to_json(r) + "\n" for r in records))
    for rank in range(world):
        if os.path.exists(f"{path}.rank{rank}"):
            os.remove(f"{path}.rank{rank}")
