"""One trace-of-covariance run: per-prompt evaluation, resumable progress logs, merged outputs."""

from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass

import torch

from grpo_mse import cli
from grpo_mse import distributed as dist
from grpo_mse.analysis.advisor import BetweenPromptBatch
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.config import TracecovConfig
from grpo_mse.gradients.engine import PromptStats, prompt_traces
from grpo_mse.policy.loading import eos_token_ids, load_policy, model_tag
from grpo_mse.policy.logprobs import sequence_logprobs, shared_prompt_logprobs
from grpo_mse.policy.sampling import decode, row_generators, sample_continuations
from grpo_mse.rewards.rules import row_reward
from grpo_mse.tables.inputs import load_rows, prompt_ids, row_keys, selection, settings_mismatch
from grpo_mse.tables.outputs import append_jsonl, mean_ci, read_complete_jsonl, timestamp, write_csv, write_json
from grpo_mse.tables.resume import choose, claim, fingerprint, lock
from grpo_mse.tables.validate import (
    check_answers,
    check_oracle_values,
    check_prompt_lengths,
    check_prompts,
    model_positions,
)

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
    score_distribution: str = "model"  # model: grad log pi_T (untruncated); sampling: grad log q (nucleus)

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
                            temperature=self.temperature,
                            top_p=self.top_p if self.score_distribution == "sampling" else 1.0)
        return logprobs


def evaluate_prompt(sampler: Sampler, row: dict, key: int, prompt_index: int, k: int, m: int,
                    names, engine: str, shared_samples: bool = False, per_pass: int = 0) -> tuple[dict, PromptStats]:
    """Sample M*K continuations, score them; return this prompt's record (tr_cov per estimator) and stats.

    Sample j of a prompt comes from stream (seed, K, key, j), or (seed, 0, key, j) with
    ``shared_samples``: then every K uses the first M*K samples of one sequence (nested groups).
    """
    stream = (0, key) if shared_samples else (k, key)
    ids, continuations, texts = sampler.draw(row, stream, m * k)
    rewards = torch.tensor([row_reward(row, t) for t in texts])
    groups = [continuations[g * k:(g + 1) * k] for g in range(m)]
    params = [p for p in sampler.model.parameters() if p.requires_grad]
    value = float(row["V_oracle"])
    stats = prompt_traces(sampler.logprob_fn(ids), params, groups, rewards.view(m, k), value, names, engine,
                          per_pass, measure_score=0.0 < value < 1.0)
    record = {
        "K": k, "prompt_index": prompt_index, "id": row.get("id", prompt_index),
        "prompt": row["prompt"], "gold": row["ground_truth"], "V_oracle": float(row["V_oracle"]),
        "mean_reward": float(rewards.mean()), "tr_cov": stats.traces,
    }
    if stats.bias2:  # biased estimators: MSE = trace of covariance + squared bias
        record["bias2"] = stats.bias2
        record["mse"] = {n: stats.traces[n] + stats.bias2.get(n, 0.0) for n in names}
    record.update(score_fields(stats, row))
    return record, stats


def score_fields(stats: PromptStats, row: dict) -> dict:
    """||E s||^2 (unbiased; nan unless measured, i.e. 0 < V < 1), the oracle-noise bias Var(V_hat) tr Cov(s_g)
    with Var(V_hat) estimated by V_hat (1 - V_hat) / (n_oracle - 1) (0 for an exact V), and std-GRPO against
    its own target g / sqrt(V (1 - V))."""
    value, n_oracle = float(row["V_oracle"]), row.get("n_oracle")
    noise = value * (1 - value) / (n_oracle - 1) if isinstance(n_oracle, int) and n_oracle > 1 else 0.0
    fields = {"mean_score_sq": stats.mean_score_sq, "oracle_noise": noise * stats.score_trace if noise else 0.0}
    if stats.bias2_own:
        fields["bias2_own"] = stats.bias2_own
        fields["mse_own"] = {n: stats.traces[n] + b for n, b in stats.bias2_own.items()}
    return fields


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


def run_batch(sampler: Sampler, rows, keys, batch_id: int, indices: list[int], k: int, config: TracecovConfig,
              done: dict, batches: dict, progress: str, on_prompt=None) -> None:
    """Evaluate one batch of prompts at group size K, appending new records to ``progress``.

    Finished prompts are skipped, except that a batch whose c1 record is missing (advisor on) is
    evaluated whole (results are deterministic per prompt, so nothing is duplicated in the outputs).
    """
    need_c1 = config.with_advisor and len(indices) >= 2 and (k, batch_id) not in batches
    c1 = BetweenPromptBatch([p for p in sampler.model.parameters() if p.requires_grad]) if need_c1 else None
    for index in indices:
        if c1 is not None or (k, index) not in done:
            record, stats = evaluate_prompt(sampler, rows[index], keys[index], index, k, config.M,
                                            config.estimators, config.engine, config.shared_samples,
                                            config.groups_per_pass)
            if (k, index) not in done:
                append_jsonl(progress, record)
                done[(k, index)] = record
            if c1 is not None:
                c1.add(stats.accumulators["oracleV"].mean(), record["tr_cov"]["oracleV"], config.M, index)
        if on_prompt:
            on_prompt()
    if c1 is not None:
        batches[(k, batch_id)] = {"c1_batch": batch_id, "K": k, **c1.result()}
        append_jsonl(progress, batches[(k, batch_id)])


def find_resumable(save_dir: str, config: dict) -> str | None:
    """Base path of the newest unfinished run in ``save_dir`` whose saved config equals ``config`` on every one
    of TracecovConfig.RESULT_FIELDS; None when there is no unfinished run, a UsageError naming the fields that
    differ when none matches."""
    candidates = []
    for path in sorted(glob.glob(os.path.join(glob.escape(save_dir), "tracecov_*.progress.rank0.jsonl")),
                       key=os.path.getmtime):
        with open(path, encoding="utf-8") as handle:
            try:
                saved = json.loads(handle.readline()).get("config")
            except (ValueError, AttributeError):
                saved = None
        candidates.append((path.split(".progress")[0], saved))
    return choose(candidates, config, TracecovConfig.RESULT_FIELDS)


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


def select_rows(config: TracecovConfig) -> tuple[list[dict], list[int]]:
    """The T rows used (after the optional seeded subsample) and their random-stream keys."""
    rows = load_rows(config.oracle_table, required=("prompt", "ground_truth", "V_oracle"))
    keys = row_keys(rows)
    order = selection(len(rows), config.T, config.seed, config.subsample_prompts)
    if config.T > len(order):
        print(f"note: --T {config.T} > {len(order)} rows available; using all {len(order)}", file=sys.stderr)
    chosen = [rows[i] for i in order]
    for check in (check_prompts, check_answers, check_oracle_values):
        check(chosen, config.oracle_table)
    return chosen, [keys[i] for i in order]


def run_tracecov(config: TracecovConfig) -> dict | None:
    """The whole run of run_tracecov.py; on rank 0 returns {"base", "result", "plot"} (paths and summary).

    Per K: every prompt batch of this rank (torchrun shards batches), progress appended as prompts
    finish, then the per-K file; at the end the main JSON (with the advisor), the tidy CSV, the plot.
    """
    rank, world, device = dist.init_from_env(config.device)
    rows, keys = select_rows(config)
    model, tokenizer = load_policy(config.model, device, config.dtype, config.revision, config.trust_remote_code)
    lengths = [len(prompt_ids(tokenizer, row["prompt"])) for row in rows]  # fails before any file is written
    check_prompt_lengths(lengths, config.max_new_tokens, model_positions(model), config.oracle_table)
    saved_config = {**config.record(), "device": device, "world_size": world,
                    "oracle_table_fingerprint": fingerprint(config.oracle_table)}
    mismatch = settings_mismatch(rows, saved_config)
    if mismatch and rank == 0:
        print(f"warning: {mismatch}", file=sys.stderr)
    base = find_resumable(config.save_json, saved_config) if config.resume and rank == 0 else None
    if rank == 0 and base is None:
        if config.resume:
            print(f"note: no unfinished run in {config.save_json}; starting a new one", file=sys.stderr)
        os.makedirs(config.save_json, exist_ok=True)
        base = new_base(config.save_json, model_tag(config.model))
    base = dist.broadcast_text(base)
    progress = f"{base}.progress.rank{rank}.jsonl"
    run_lock = lock(progress)  # one writer per progress log, held until the run ends
    done, batches = load_progress(base)
    if os.path.getsize(progress) == 0:
        append_jsonl(progress, {"config": saved_config})
    if done:
        print(f"resuming {base}: {len(done)} prompt results already done", file=sys.stderr)
    sampler = Sampler(model, tokenizer, eos_token_ids(model, tokenizer), config.temperature, config.top_p,
                      config.max_new_tokens, config.gen_bs, config.seed, include_eos=not config.drop_eos,
                      shared_prompt=config.engine == "fast", vllm=cli.make_vllm(config, device),
                      score_distribution=config.score_distribution)
    records_by_k, batches_by_k = _sweep(config, sampler, rows, keys, base, progress, done, batches, rank, world)
    outcome = _write_outputs(config, base, records_by_k, batches_by_k, saved_config) if rank == 0 else None
    dist.barrier()
    if rank == 0:
        for path in progress_paths(base):
            os.remove(path)
    run_lock.close()
    dist.finish()
    return outcome


def _sweep(config, sampler, rows, keys, base, progress, done, batches, rank, world):
    """Every K of the run: this rank's batches, then all ranks' records merged from the progress logs."""
    all_batches = prompt_batches(len(rows), config.c1_batch)
    mine = dist.shard(list(range(len(all_batches))), rank, world)
    records_by_k, batches_by_k = {}, {}
    for k in cli.progress(config.K_list, desc="K", disable=rank > 0):
        bar = cli.progress(total=sum(len(all_batches[b]) for b in mine), desc=f"K={k} prompts", leave=False,
                           disable=rank > 0)

        def show_running_means(k=k, bar=bar):
            finished = [r for (rk, _), r in done.items() if rk == k]
            bar.update(1)
            if finished:
                bar.set_postfix({n[:6]: f"{sum(r['tr_cov'][n] for r in finished) / len(finished):.3g}"
                                 for n in config.estimators})
        for b in mine:
            run_batch(sampler, rows, keys, b, all_batches[b], k, config, done, batches, progress, show_running_means)
        bar.close()
        dist.barrier()
        latest_done, latest_batches = load_progress(base)
        done.update(latest_done)
        batches.update(latest_batches)
        records_by_k[k] = [r for (rk, _), r in done.items() if rk == k]
        batches_by_k[k] = [r for (rk, _), r in batches.items() if rk == k]
        if rank == 0:
            write_json(f"{base}_K{k}_detailed.json", detailed(records_by_k[k], k, config.estimators))
    return records_by_k, batches_by_k


def _write_outputs(config, base, records_by_k, batches_by_k, saved_config) -> dict:
    """The main JSON (with the advisor's constants), the per-prompt CSV and, unless skipped, the PNG."""
    from grpo_mse.analysis import paired

    result = summary(records_by_k, config.K_list, config.estimators, saved_config)
    result.update(paired.run_statistics(records_by_k, batches_by_k, config.K_list, config.estimators, config.seed,
                                        with_advisor=config.with_advisor, budget=config.budget,
                                        allowed=config.allowed_K))
    write_json(f"{base}.json", result)
    all_records = [r for k in config.K_list for r in records_by_k[k]]
    write_csv(f"{base}_per_prompt.csv", tidy_rows(all_records, config.estimators), TIDY_COLUMNS)
    png = None
    if not config.skip_plot:
        from grpo_mse.figures.tracecov import plot_run

        png = plot_run(result, os.path.join(config.plot_path, os.path.basename(base) + ".png"))
    return {"base": base, "result": result, "plot": png}


def summary_lines(result: dict) -> list[str]:
    """What run_tracecov.py prints: each K's traces with 95% half-widths, the paired ratios, the advisor."""
    from grpo_mse.analysis import advisor, paired

    names, lines = list(result["conditional_on_x"]), []
    for i, k in enumerate(result["K_list"]):
        lines.append(f"K={k:4d}  " + "  ".join(f"{est.get(n).label}={result['conditional_on_x'][n][i]:.4g}"
                                              f"±{result['ci95'][n][i]:.2g}" for n in names))
    if "paired" in result:
        lines.append(paired.describe(result["paired"]))
    if "group_size_advisor" in result:
        lines.append(advisor.describe(result["group_size_advisor"]))
    return lines
