"""One trace-of-covariance run: per-prompt evaluation, resumable progress logs, merged outputs."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass

import torch

from grpo_mse.analysis.advisor import BetweenPromptBatch
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import PromptStats, prompt_traces
from grpo_mse.policy.logprobs import sequence_logprobs, shared_prompt_logprobs
from grpo_mse.policy.sampling import decode, row_generators, sample_continuations
from grpo_mse.rewards.rules import last_integer_reward
from grpo_mse.tables.inputs import prompt_ids
from grpo_mse.tables.outputs import append_jsonl, mean_ci, read_complete_jsonl, timestamp
from grpo_mse.tables.resume import choose, claim

# Flags that change the numbers: a resumed run must agree on all of them.
RESULT_FLAGS = ("model", "revision", "oracle_table_fingerprint", "dtype", "seed", "T", "M", "K_list",
                "temperature", "top_p", "max_new_tokens", "subsample_prompts", "drop_eos", "estimators",
                "shared_samples", "c1_batch", "no_advisor", "backend")
NOTE = ("tr_cov = trace of the unbiased (M-1) sample covariance over M groups of the gradient estimate, "
        "over all parameters, per prompt, averaged over prompts (= MSE for unbiased estimators); "
        "ci95 = 1.96 sd / sqrt(T) across prompts.")


@dataclass
class Sampler:
    """Everything needed to sample and score continuations of one prompt."""

    model: object
    tokenizer: object
    eos_ids: list[int]
    temperature: float
    top_p: float
    max_new_tokens: int
    gen_bs: int
    seed: int
    include_eos: bool = True
    shared_prompt: bool = True  # run the prompt once per group (fast) or once per sequence (reference)
    vllm: object = None  # a grpo_mse.policy.vllm_sampler.VLLMSampler to sample with instead of the HF model

    def draw(self, row: dict, stream: tuple[int, ...], count: int) -> tuple[list[int], list[list[int]], list[str]]:
        """(prompt ids, ``count`` continuations, their texts) from random stream (seed, *stream)."""
        ids = prompt_ids(self.tokenizer, row["prompt"])
        if self.vllm is not None:
            continuations = self.vllm.sample([(ids, count, (self.seed, *stream))], temperature=self.temperature,
                                             top_p=self.top_p, max_new_tokens=self.max_new_tokens,
                                             eos_ids=self.eos_ids)[0]
            return ids, continuations, decode(self.tokenizer, continuations)
        generators = row_generators(self.seed, *stream, count=count)
        continuations = sample_continuations(
            self.model, [ids] * count, generators, temperature=self.temperature, top_p=self.top_p,
            max_new_tokens=self.max_new_tokens, eos_ids=self.eos_ids,
            pad_id=self.tokenizer.pad_token_id, batch_size=self.gen_bs)
        return ids, continuations, decode(self.tokenizer, continuations)

    def logprob_fn(self, ids: list[int]):
        """continuations -> [K] sequence log-probabilities (with grad) given prompt ``ids``."""
        function = shared_prompt_logprobs if self.shared_prompt else sequence_logprobs

        def logprobs(continuations):
            return function(self.model, ids, continuations, eos_ids=self.eos_ids,
                            pad_id=self.tokenizer.pad_token_id, include_eos=self.include_eos,
                            temperature=self.temperature)
        return logprobs


def evaluate_prompt(sampler: Sampler, row: dict, key: int, prompt_index: int, k: int, m: int,
                    names, engine: str, shared_samples: bool = False, per_pass: int = 0) -> tuple[dict, PromptStats]:
    """Sample M*K continuations, score them; return this prompt's record (tr_cov per estimator) and stats.

    Sample j of a prompt comes from stream (seed, K, key, j), or (seed, 0, key, j) with
    ``shared_samples``: then every K uses the first M*K samples of one sequence (nested groups).
    """
    stream = (0, key) if shared_samples else (k, key)
    ids, continuations, texts = sampler.draw(row, stream, m * k)
    rewards = torch.tensor([last_integer_reward(t, row["ground_truth"]) for t in texts])
    groups = [continuations[g * k:(g + 1) * k] for g in range(m)]
    params = [p for p in sampler.model.parameters() if p.requires_grad]
    stats = prompt_traces(sampler.logprob_fn(ids), params, groups, rewards.view(m, k),
                          float(row["V_oracle"]), names, engine, per_pass)
    record = {
        "K": k, "prompt_index": prompt_index, "id": row.get("id", prompt_index),
        "prompt": row["prompt"], "gold": row["ground_truth"], "V_oracle": float(row["V_oracle"]),
        "mean_reward": float(rewards.mean()), "tr_cov": stats.traces,
    }
    if stats.bias2:  # biased estimators: MSE = trace of covariance + squared bias
        record["bias2"] = stats.bias2
        record["mse"] = {n: stats.traces[n] + stats.bias2.get(n, 0.0) for n in names}
    return record, stats


def progress_paths(base: str) -> list[str]:
    return sorted(glob.glob(glob.escape(base) + ".progress*.jsonl"))


def load_progress(base: str) -> tuple[dict[tuple[int, int], dict], dict[tuple[int, int], dict]]:
    """Finished prompts {(K, prompt_index): record} and c1 batches {(K, batch): record} of run ``base``."""
    done, batches = {}, {}
    for path in progress_paths(base):
        for record in read_complete_jsonl(path):
            if "tr_cov" in record:
                done[(record["K"], record["prompt_index"])] = record
            elif "c1_batch" in record:
                batches[(record["K"], record["c1_batch"])] = record
    return done, batches


def prompt_batches(count: int, size: int) -> list[list[int]]:
    """Consecutive prompt indices in batches of ``size`` (the unit of sharding and of c1)."""
    return [list(range(start, min(start + size, count))) for start in range(0, count, size)]


def run_batch(sampler: Sampler, rows, keys, batch_id: int, indices: list[int], k: int, args, done: dict,
              batches: dict, progress: str, with_advisor: bool, on_prompt=None) -> None:
    """Evaluate one batch of prompts at group size K, appending new records to ``progress``.

    Finished prompts are skipped, except that a batch whose c1 record is missing is evaluated
    whole (results are deterministic per prompt, so nothing is duplicated in the outputs).
    """
    need_c1 = with_advisor and len(indices) >= 2 and (k, batch_id) not in batches
    c1 = BetweenPromptBatch([p for p in sampler.model.parameters() if p.requires_grad]) if need_c1 else None
    for index in indices:
        if c1 is not None or (k, index) not in done:
            record, stats = evaluate_prompt(sampler, rows[index], keys[index], index, k, args.M,
                                            args.estimators, args.engine, args.shared_samples,
                                            getattr(args, "groups_per_pass", 0))
            if (k, index) not in done:
                append_jsonl(progress, record)
                done[(k, index)] = record
            if c1 is not None:
                c1.add(stats.accumulators["oracleV"].mean(), record["tr_cov"]["oracleV"], args.M)
        if on_prompt:
            on_prompt()
    if c1 is not None:
        batches[(k, batch_id)] = {"c1_batch": batch_id, "K": k, **c1.result()}
        append_jsonl(progress, batches[(k, batch_id)])


def find_resumable(save_dir: str, config: dict) -> str | None:
    """Base path of the newest unfinished run in ``save_dir`` whose result flags all equal ``config``'s.

    None when there is no unfinished run; a UsageError naming the flags that differ when none matches."""
    candidates = []
    for path in sorted(glob.glob(os.path.join(glob.escape(save_dir), "tracecov_*.progress.rank0.jsonl")),
                       key=os.path.getmtime):
        with open(path, encoding="utf-8") as handle:
            try:
                saved = json.loads(handle.readline()).get("config")
            except (ValueError, AttributeError):
                saved = None
        candidates.append((path.split(".progress")[0], saved))
    return choose(candidates, config, RESULT_FLAGS)


def new_base(save_dir: str, tag: str) -> str:
    """A fresh run base ``tracecov_{tag}_{timestamp}`` (``_2``, ... if taken), claimed by creating its rank-0 log."""
    def taken(stem: str) -> bool:
        return bool(glob.glob(glob.escape(stem) + "[._]*"))
    return claim(os.path.join(save_dir, f"tracecov_{tag}_{timestamp()}"), ".progress.rank0.jsonl", taken)


def detailed(records: list[dict], k: int, names) -> dict:
    """The per-K file: every prompt's record and the average trace per estimator."""
    ordered = sorted(records, key=lambda r: r["prompt_index"])
    return {"K": k, "prompt_results": ordered,
            "avg_traces": {n: mean_ci([r["tr_cov"][n] for r in ordered])["mean"] for n in names}}


def summary(records_by_k: dict[int, list[dict]], k_list: list[int], names, config: dict) -> dict:
    """The main file: per estimator, the mean over prompts per K, with sd and 95% half-widths."""
    stats = {n: [mean_ci([r["tr_cov"][n] for r in records_by_k[k]]) for k in k_list] for n in names}
    return {
        "K_list": k_list,
        "conditional_on_x": {n: [s["mean"] for s in stats[n]] for n in names},
        "ci95": {n: [s["ci95"] for s in stats[n]] for n in names},
        "sd": {n: [s["sd"] for s in stats[n]] for n in names},
        "n_prompts": [len(records_by_k[k]) for k in k_list],
        "mean_V_oracle": mean_ci([r["V_oracle"] for r in records_by_k[k_list[0]]])["mean"],
        **biased_summary(records_by_k, k_list, names),
        "config": config,
        "note": NOTE,
    }


def biased_summary(records_by_k: dict[int, list[dict]], k_list: list[int], names) -> dict:
    """For runs with biased estimators: mean squared bias and MSE = trace + bias^2, with 95% half-widths."""
    if not any("bias2" in r for k in k_list for r in records_by_k[k]):
        return {}
    out = {"bias2": {}, "mse": {}, "mse_ci95": {}}
    for n in names:
        mse = [mean_ci([r["mse"][n] for r in records_by_k[k]]) for k in k_list]
        out["mse"][n], out["mse_ci95"][n] = [s["mean"] for s in mse], [s["ci95"] for s in mse]
        if n in est.BIASED:
            out["bias2"][n] = [mean_ci([r["bias2"][n] for r in records_by_k[k]])["mean"] for k in k_list]
    return out


def tidy_rows(records: list[dict], names) -> list[dict]:
    """Long table: one row per (prompt, K, estimator); mse = trace (+ bias2 for biased estimators)."""
    return [{"prompt_index": r["prompt_index"], "id": r["id"], "K": r["K"], "estimator": n,
             "trace": r["tr_cov"][n], "bias2": r.get("bias2", {}).get(n, 0.0),
             "mse": r.get("mse", r["tr_cov"])[n], "V_oracle": r["V_oracle"], "mean_reward": r["mean_reward"]}
            for r in sorted(records, key=lambda r: (r["K"], r["prompt_index"])) for n in names]


TIDY_COLUMNS = ["prompt_index", "id", "K", "estimator", "trace", "bias2", "mse", "V_oracle", "mean_reward"]
DEFAULT_ESTIMATORS = list(est.UNBIASED)
