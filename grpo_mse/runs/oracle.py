"""The oracle-value run: Monte Carlo V(x) = P(reward = 1 | x) per prompt, appended to a JSONL table.

Each line is the input row plus V_oracle, n_oracle, correct_count and a 95% Wilson interval,
written as soon as a prompt's samples are scored. The run's settings are saved beside the table
(``*.settings.json``); --resume continues the newest file whose settings are equal.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from grpo_mse import cli, distributed
from grpo_mse.config.gradient_evaluation import OracleConfig
from grpo_mse.errors import require
from grpo_mse.policy.loading import load_policy
from grpo_mse.policy.model_source import model_basename_tag
from grpo_mse.policy.sampler_backends import make_sampler
from grpo_mse.policy.sampling import Sampler, SamplingSettings, decode
from grpo_mse.rewards.rules import check_answer_rule, check_answers, row_reward
from grpo_mse.tables.inputs import (
    check_prompt_lengths,
    check_prompts,
    has_unique_ids,
    load_rows,
    model_positions,
    oracle_settings,
    prompt_ids,
    row_keys,
    selection,
)
from grpo_mse.tables.outputs import append_jsonl, read_complete_jsonl, to_json, wilson_interval, write_atomic
from grpo_mse.tables.records import OracleValues
from grpo_mse.tables.resume import RunFolder, fingerprint, lock


def settings(config: OracleConfig) -> dict:
    """The run's RESULT_FIELDS, with the dataset as its content fingerprint (or hub id)."""
    return {**{name: getattr(config, name) for name in config.RESULT_FIELDS}, "dataset": fingerprint(config.dataset)}


@dataclass(frozen=True)
class OracleOutcome:
    """What an oracle run returns on rank 0 (``run_oracle``)."""

    path: str  # the JSONL table written (or resumed)
    new: int  # prompts sampled by this run
    total: int  # rows in the output file (a resumed file may hold more than --limit selects)
    selected: int  # table rows this run covered
    seconds: float  # wall-clock time of the sampling
    lengths: ContinuationLengths | None = None  # this rank's continuations (None: nothing sampled)


@dataclass
class ContinuationLengths:
    """The sampled continuations' lengths in tokens, and how many reached --max_new_tokens without an end token.
    A cut answer scores 0 under a rule that reads the final answer (GSM8K's ``####``, MATH's ``\\boxed{}``), so a
    limit below the model's answer lengths gives V = 0 with no other sign: the command prints both."""

    limit: int
    eos_ids: tuple[int, ...]
    lengths: list[int] = field(default_factory=list)
    cut: int = 0

    def add(self, continuation: list[int]) -> None:
        self.lengths.append(len(continuation))
        ended = len(continuation) < self.limit or (bool(continuation) and continuation[-1] in self.eos_ids)
        self.cut += not ended

    def line(self) -> str | None:
        """One line: the median, 90th percentile and longest length, and the share cut (None: nothing sampled)."""
        if not self.lengths:
            return None
        ordered = sorted(self.lengths)
        median, p90 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, (9 * len(ordered)) // 10)]
        cut = f"{self.cut} of {len(ordered)} ({100 * self.cut / len(ordered):.0f}%)"
        advice = "; their answers are cut: raise --max_new_tokens" if self.cut else ""
        return (
            f"continuation lengths (tokens): median {median}, 90th percentile {p90}, longest {ordered[-1]}; "
            f"{cut} reached --max_new_tokens {self.limit} without ending{advice}"
        )


def run_oracle(config: OracleConfig) -> OracleOutcome | None:
    """The whole run of calculate_oracle_v.py; its ``OracleOutcome`` on rank 0, None on the other ranks."""
    run = OracleRun.start(config)
    start = time.time()
    run.sample_all()
    run.close()
    if run.rank != 0:
        return None
    total = len(read_complete_jsonl(run.path))
    return OracleOutcome(run.path, len(run.todo), total, len(run.rows), time.time() - start, run.lengths)


@dataclass
class OracleRun:
    """One oracle run, read top to bottom: ``start`` (rows, policy, the output file: new or resumed, the rows
    still to do on this rank), ``sample_all`` (n_oracle samples per prompt, one line per finished prompt),
    ``close`` (rank 0 merges the torchrun shards).

    Sample j of row i uses random stream (seed, key_i, j). HF: batches of --batch_size sequences cross
    prompt boundaries. vLLM: --batch_size prompts per vLLM call (the factory is given both).
    """

    config: OracleConfig
    rows: list[dict]
    keys: list[int]  # each row's random-stream key (its id, or its position)
    ids: list[list[int]]  # each row's prompt token ids
    sampler: Sampler  # --backend's (config.gradient_evaluation.make_sampler)
    tokenizer: object
    path: str  # the output table
    shard_path: str  # this rank's file (the table itself without torchrun)
    key_field: str  # "id" when ids are unique, else "row_index"
    todo: list[int] = field(default_factory=list)  # row positions still to sample on this rank
    rank: int = 0
    world: int = 1
    lock: object = None
    lengths: ContinuationLengths | None = None  # of this rank's samples

    @classmethod
    def start(cls, config: OracleConfig) -> OracleRun:
        rank, world, device = distributed.init_from_env(config.device)
        table = load_rows(config.dataset, config.split)
        # Keys are decided on the whole table, not on the rows selected, so that a --limit 2 run and its
        # --limit 6 --resume key the same rows the same way (a table whose ids repeat only past row 2 would
        # otherwise be keyed by id first and by position on the resume, and its rows written twice).
        key_field = "id" if has_unique_ids(table) else "row_index"
        chosen = list(range(len(table)))[: config.limit]
        if config.sample is not None:  # a seeded random sample of the rows (inputs.selection's subsample)
            chosen = [chosen[i] for i in selection(len(chosen), len(chosen), config.seed, config.sample)]
        rows = [table[i] for i in chosen]
        check_prompts(rows, config.dataset)
        check_answers(rows, config.dataset)
        check_answer_rule(rows, config.answer_rule, config.dataset)
        table_keys = row_keys(table)
        keys = [table_keys[i] for i in chosen]
        current = settings(config)
        folder = RunFolder(config.out_dir, "oracle_v_n", ".jsonl", config.RESULT_FIELDS)
        stem = folder.resumable(current) if config.resume and rank == 0 else None
        if config.resume and rank == 0 and stem is None:
            print(f"note: nothing to resume in {config.out_dir}; starting a new file", file=sys.stderr)
        model, tokenizer = load_policy(
            config.model_source, device, config.dtype, config.revision, config.trust_remote_code
        )
        ids = [prompt_ids(tokenizer, row["prompt"]) for row in rows]
        check_prompt_lengths([len(i) for i in ids], config.max_new_tokens, model_positions(model), config.dataset)
        if rank == 0 and stem is None:
            stem = folder.claim(f"oracle_v_n{config.n_oracle}_{model_basename_tag(config.model_source)}", current)
        # Only rank 0 claims a name (its timestamp could differ on another rank); the others take rank 0's.
        path = distributed.broadcast_text(stem + ".jsonl" if rank == 0 else "")
        shard_path = path if world == 1 else f"{path}.rank{rank}"
        run_lock = lock(shard_path)  # one writer per file, held until the run ends
        # A resumed torchrun run finds rows both in the merged table (earlier runs) and in its shard (a run
        # stopped before the merge): either counts as done.
        done = [rec for p in {path, shard_path} for rec in read_complete_jsonl(p)]
        require(
            all(key_field in rec for rec in done),
            f"cannot --resume {path}: its rows have no {key_field!r} (written when the table's ids were read as "
            f"unique); run without --resume for a new file",
        )
        done_keys = {rec[key_field] for rec in done}
        todo = [i for i in distributed.shard(list(range(len(rows))), rank, world) if keys[i] not in done_keys]
        if done_keys:
            print(f"resuming {path}: {len(done_keys)} prompts already done", file=sys.stderr)
        os.makedirs(config.out_dir, exist_ok=True)
        sampling = SamplingSettings.of_run(config, model, tokenizer)
        sampler = make_sampler(config, model, sampling, config.batch_size, requests_per_call=config.batch_size)
        lengths = ContinuationLengths(config.max_new_tokens, tuple(sampling.eos_ids))
        return cls(
            config,
            rows,
            keys,
            ids,
            sampler,
            tokenizer,
            path,
            shard_path,
            key_field,
            todo,
            rank,
            world,
            run_lock,
            lengths,
        )

    def sample_all(self) -> None:
        """Score n_oracle samples of every row to do; append a row's line as soon as its last sample is scored."""
        config = self.config
        correct = dict.fromkeys(self.todo, 0)
        # A prompt's samples can span several sampler batches: its line is written when its count reaches 0.
        remaining = dict.fromkeys(self.todo, config.n_oracle)
        requests = [(self.ids[i], config.n_oracle, (config.seed, self.keys[i])) for i in self.todo]
        bar = cli.progress(total=len(self.todo), desc="prompts", disable=self.rank > 0)
        for position, continuation in self.sampler.iter_samples(requests):
            i = self.todo[position]
            self.lengths.add(continuation)
            text = decode(self.tokenizer, [continuation])[0]
            correct[i] += int(row_reward(self.rows[i], text, config.answer_rule))
            remaining[i] -= 1
            if remaining[i] == 0:
                self.write_row(i, correct[i])
                bar.update(1)
        bar.close()

    def write_row(self, i: int, correct: int) -> None:
        n = self.config.n_oracle
        low, high = wilson_interval(correct, n)
        extra = {"row_index": self.keys[i]} if self.key_field == "row_index" else {}  # the row's table position
        values = OracleValues(correct / n, n, correct, low, high, oracle_settings=oracle_settings(self.config, n))
        append_jsonl(self.shard_path, values.merged_into({**self.rows[i], **extra}))

    def close(self) -> None:
        distributed.barrier()  # rank 0 merges only once every rank's shard file is complete
        if self.rank == 0 and self.world > 1:
            merge_shards(self.path, self.world, self.keys, self.key_field)
        self.lock.close()
        distributed.finish()


def merge_shards(path: str, world: int, keys: list[int], key_field: str) -> None:
    """Fold the ranks' files into ``path`` in table order, atomically, and remove the shard files."""
    records = read_complete_jsonl(path)
    for rank in range(world):
        records += read_complete_jsonl(f"{path}.rank{rank}")
    position = {key: i for i, key in enumerate(keys)}
    # Rows outside this run's selection (a resumed file written with a larger --limit) keep their order, last.
    records.sort(key=lambda r: position.get(r.get(key_field), len(keys)))
    write_atomic(path, "".join(to_json(r) + "\n" for r in records))
    for rank in range(world):
        if os.path.exists(f"{path}.rank{rank}"):
            os.remove(f"{path}.rank{rank}")
