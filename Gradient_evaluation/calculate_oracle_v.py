"""Monte Carlo oracle value V(x) = P(reward = 1 | x) per prompt, from n_oracle sampled continuations.

Writes one JSON line per prompt: the input row plus V_oracle, n_oracle, correct_count and a 95%
Wilson interval. Lines are appended as prompts finish; --resume continues the latest matching file.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

from grpo_mse import cli
from grpo_mse import distributed as dist
from grpo_mse.policy.loading import check_model_path, eos_token_ids, load_policy, model_basename_tag
from grpo_mse.policy.sampling import decode, row_generators, sample_continuations
from grpo_mse.rewards.rules import last_integer_reward
from grpo_mse.tables.inputs import has_unique_ids, load_rows, prompt_ids, row_keys
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
from grpo_mse.tables.validate import check_integer_answers, check_prompt_lengths, check_prompts, model_positions


def parse_args(argv=None) -> argparse.Namespace:
    p = cli.ArgumentParser(description=__doc__)
    cli.add_model_flags(p, model=None, device="cuda", dtype="fp16")
    p.add_argument("--dataset", required=True, help="local .jsonl/.parquet/folder, or a hub dataset id")
    p.add_argument("--split", default="train", help="split of a dataset folder or hub dataset")
    p.add_argument("--n_oracle", type=int, default=1000, help="samples per prompt")
    p.add_argument("--batch_size", type=int, default=32, help="sequences per generation batch")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (> 0)")
    p.add_argument("--top_p", type=float, default=0.95, help="nucleus mass (0 < top_p <= 1)")
    p.add_argument("--max_new_tokens", type=int, default=32, help="tokens per continuation (>= 1)")
    p.add_argument("--out_dir", default="oracle_v_results", help="output folder")
    p.add_argument("--limit", type=int, default=None, help="only the first N rows")
    cli.add_backend_flags(p)
    p.add_argument("--resume", action="store_true",
                   help="continue the newest file in --out_dir with equal settings (docs/safety.md), skipping done ids")
    args = p.parse_args(argv)
    cli.require(args.n_oracle >= 1, f"--n_oracle must be >= 1 (got {args.n_oracle})")
    cli.require(args.batch_size >= 1, f"--batch_size must be >= 1 (got {args.batch_size})")
    cli.require(0 < args.top_p <= 1 and args.temperature > 0, "need 0 < --top_p <= 1 and --temperature > 0")
    cli.check_range("--max_new_tokens", args.max_new_tokens, minimum=1)
    if args.limit is not None:
        cli.check_range("--limit", args.limit, minimum=1)
    cli.check_backend(args.backend, args.device, args.vllm_gpu_util)
    cli.writable_dir(args.out_dir, "--out_dir")
    check_model_path(args.model)
    return args


# Settings that change the numbers: --resume continues a file only when all of them are equal.
RESULT_SETTINGS = ("model", "revision", "dataset", "split", "n_oracle", "seed", "temperature", "top_p",
                   "max_new_tokens", "dtype", "backend")


def settings(args) -> dict:
    """The run's RESULT_SETTINGS, with the dataset as its content fingerprint (or hub id)."""
    return {**{key: getattr(args, key) for key in RESULT_SETTINGS}, "dataset": fingerprint(args.dataset)}


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


def resumable(args, current: dict) -> str | None:
    """The newest file in --out_dir with equal settings, None when there is none (a one-line refusal
    naming what differs when the newest file's settings differ)."""
    candidates = [(path, read_settings(settings_path(path)))
                  for path in sorted(glob.glob(os.path.join(glob.escape(args.out_dir), "oracle_v_n*.jsonl")),
                                     key=os.path.getmtime)]
    chosen = choose(candidates, current, RESULT_SETTINGS)
    if chosen is None:
        print(f"note: nothing to resume in {args.out_dir}; starting a new file", file=sys.stderr)
    return chosen


def new_output(args, current: dict) -> str:
    """A new timestamped file (``_2``, ... when the name is taken), created here beside its settings."""
    os.makedirs(args.out_dir, exist_ok=True)
    stem = claim(os.path.join(args.out_dir, f"oracle_v_n{args.n_oracle}_{model_basename_tag(args.model)}_"
                                            f"{timestamp()}"), ".jsonl")
    write_json(stem + ".settings.json", current)
    return stem + ".jsonl"


def sampled_texts(args, model, tokenizer, ids, keys, todo, eos, vllm=None):
    """Yield (row position, decoded continuation) for n_oracle samples of each prompt, prompt by prompt.

    HF: batches of --batch_size sequences cross prompt boundaries; sample j of row i uses stream
    (seed, key_i, j). vLLM: --batch_size prompts per call, each with its own seed (seed, key_i).
    """
    if vllm is not None:
        for first in range(0, len(todo), args.batch_size):
            chunk = todo[first:first + args.batch_size]
            outputs = vllm.sample([(ids[i], args.n_oracle, (args.seed, keys[i])) for i in chunk],
                                  temperature=args.temperature, top_p=args.top_p,
                                  max_new_tokens=args.max_new_tokens, eos_ids=eos)
            for i, continuations in zip(chunk, outputs):
                yield from ((i, text) for text in decode(tokenizer, continuations))
        return
    items = [(i, j) for i in todo for j in range(args.n_oracle)]
    for first in range(0, len(items), args.batch_size):
        batch = items[first:first + args.batch_size]
        generators = [row_generators(args.seed, keys[i], count=1, start=j)[0] for i, j in batch]
        continuations = sample_continuations(
            model, [ids[i] for i, _ in batch], generators, temperature=args.temperature, top_p=args.top_p,
            max_new_tokens=args.max_new_tokens, eos_ids=eos, pad_id=tokenizer.pad_token_id,
            batch_size=args.batch_size)
        yield from ((i, text) for (i, _), text in zip(batch, decode(tokenizer, continuations)))


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world, device = dist.init_from_env(args.device)
    rows = load_rows(args.dataset, args.split)[: args.limit]
    check_prompts(rows, args.dataset)
    check_integer_answers(rows, args.dataset)
    keys = row_keys(rows)
    current = settings(args)
    path = resumable(args, current) if args.resume and rank == 0 else None
    model, tokenizer = load_policy(args.model, device, args.dtype, args.revision, args.trust_remote_code)
    ids = [prompt_ids(tokenizer, row["prompt"]) for row in rows]
    check_prompt_lengths([len(i) for i in ids], args.max_new_tokens, model_positions(model), args.dataset)
    eos = eos_token_ids(model, tokenizer)
    path = dist.broadcast_text((path or new_output(args, current)) if rank == 0 else "")
    shard_path = path if world == 1 else f"{path}.rank{rank}"
    run_lock = lock(shard_path)  # noqa: F841 - held until the process ends: one writer per file
    key_field = "id" if has_unique_ids(rows) else "row_index"
    done_keys = {rec.get(key_field) for p in {path, shard_path} for rec in read_complete_jsonl(p)}
    todo = [i for i in dist.shard(list(range(len(rows))), rank, world) if keys[i] not in done_keys]
    if done_keys:
        print(f"resuming {path}: {len(done_keys)} prompts already done", file=sys.stderr)
    os.makedirs(args.out_dir, exist_ok=True)
    correct = dict.fromkeys(todo, 0)
    remaining = dict.fromkeys(todo, args.n_oracle)
    sampled = sampled_texts(args, model, tokenizer, ids, keys, todo, eos, cli.make_vllm(args, device))
    start = time.time()
    bar = cli.progress(total=len(todo), desc="prompts", disable=rank > 0)
    for i, text in sampled:
        correct[i] += int(last_integer_reward(text, rows[i]["ground_truth"]))
        remaining[i] -= 1
        if remaining[i] == 0:
            low, high = wilson_interval(correct[i], args.n_oracle)
            extra = {"row_index": i} if key_field == "row_index" else {}
            append_jsonl(shard_path, {**rows[i], **extra, "V_oracle": correct[i] / args.n_oracle,
                                      "n_oracle": args.n_oracle, "correct_count": correct[i],
                                      "V_ci95_low": low, "V_ci95_high": high})
            bar.update(1)
    bar.close()
    dist.barrier()
    if rank == 0 and world > 1:
        merge_shards(path, world, keys, key_field)
    minutes = (time.time() - start) / 60
    if rank == 0:
        print(f"examples: {len(todo)} new, {len(rows)} total")
        print(f"elapsed: {minutes:.2f} min ({60 * minutes / max(len(todo), 1):.2f} s per example)")
        print(f"output: {path}")
    dist.finish()


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


if __name__ == "__main__":
    cli.run(main, resume_hint="rerun the same command with --resume to continue")
