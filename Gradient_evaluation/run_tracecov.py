"""Trace of covariance (= MSE) of the vanilla, GRPO and oracle-baseline policy gradients against K.

For each K and prompt x: sample M groups of K continuations, form each estimator's gradient per
group over all parameters, take the trace of their sample covariance (denominator M-1), and
average over prompts with a 95% interval. Run with torchrun to shard prompts across processes.
"""

from __future__ import annotations

import argparse
import os
import sys

from grpo_mse import cli
from grpo_mse import distributed as dist
from grpo_mse.gradients import job
from grpo_mse.gradients.engine import ENGINES
from grpo_mse.gradients.estimators import ALL as ALL_ESTIMATORS
from grpo_mse.policy.loading import check_model_path, eos_token_ids, load_policy, model_tag
from grpo_mse.tables.inputs import load_rows, prompt_ids, row_keys, selection
from grpo_mse.tables.outputs import append_jsonl, write_csv, write_json
from grpo_mse.tables.resume import fingerprint, lock
from grpo_mse.tables.validate import (
    check_integer_answers,
    check_oracle_values,
    check_prompt_lengths,
    check_prompts,
    model_positions,
)


def parse_args(argv=None) -> argparse.Namespace:
    p = cli.ArgumentParser(description=__doc__)
    cli.add_model_flags(p, model="Qwen/Qwen2.5-0.5B-Instruct", device="cuda", dtype="bf16")
    p.add_argument("--oracle_table", required=True, help=".jsonl/.parquet with prompt, ground_truth, V_oracle")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--T", type=int, default=500,
                   help="prompts used: the first T of a shuffle seeded with --seed (all, in order, if no more rows)")
    p.add_argument("--M", type=int, default=16, help="independent groups per prompt (>= 2)")
    p.add_argument("--K_list", type=int, nargs="+", default=[4, 8, 16, 32, 64], help="group sizes (>= 2)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_p", type=float, default=0.95)
    p.add_argument("--max_new_tokens", type=int, default=32)
    p.add_argument("--gen_bs", type=int, default=64, help="max sequences per generation batch")
    p.add_argument("--subsample_prompts", type=int, default=None,
                   help="randomly subsample this many rows of the table (seeded) before taking T")
    p.add_argument("--save_json", required=True, help="output DIRECTORY for the JSON/CSV results")
    p.add_argument("--plot_path", default=None, help="output directory of the PNG (required unless --skip_plot)")
    p.add_argument("--skip_plot", action="store_true", help="write no PNG")
    p.add_argument("--engine", default="fast", choices=ENGINES,
                   help="fast: at most two vector-Jacobian products per group, several groups per batched "
                        "backward call; reference: one backward pass per estimator (original)")
    p.add_argument("--groups_per_pass", type=int, default=0,
                   help="fast engine: groups per forward pass and batched backward call (0 = auto: up to 32 "
                        "sequences, at most 8 groups, within 2 GiB of gradients)")
    p.add_argument("--estimators", nargs="+", default=job.DEFAULT_ESTIMATORS, choices=ALL_ESTIMATORS)
    p.add_argument("--drop_eos", action="store_true",
                   help="reproduce the original: leave a sampled EOS token out of log pi(y|x)")
    p.add_argument("--shared_samples", action="store_true",
                   help="draw M*max(K) continuations once per prompt and form every K's groups from them")
    p.add_argument("--no_advisor", action="store_true", help="skip the group-size advisor (c1, c2, c3, K*)")
    p.add_argument("--c1_batch", type=int, default=16,
                   help="prompts per batch for c1 (between-prompt variance) and per unit of torchrun sharding")
    cli.add_backend_flags(p)
    p.add_argument("--resume", action="store_true",
                   help="continue the newest unfinished run in --save_json with the same settings (docs/safety.md)")
    args = p.parse_args(argv)
    cli.require(args.M >= 2, f"--M must be >= 2 (got {args.M})")
    cli.require(all(k >= 2 for k in args.K_list), f"every K in --K_list must be >= 2 (got {args.K_list})")
    cli.require(args.T >= 1, f"--T must be >= 1 (got {args.T})")
    cli.require(args.groups_per_pass >= 0, f"--groups_per_pass must be >= 0 (got {args.groups_per_pass})")
    for flag, minimum in (("gen_bs", 1), ("c1_batch", 1), ("max_new_tokens", 1), ("subsample_prompts", 1)):
        if getattr(args, flag) is not None:
            cli.check_range(f"--{flag}", getattr(args, flag), minimum=minimum)
    args.K_list, args.estimators = cli.unique(args.K_list, "--K_list"), cli.unique(args.estimators, "--estimators")
    cli.check_backend(args.backend, args.device, args.vllm_gpu_util)
    cli.require(args.skip_plot or args.plot_path, "--plot_path is required unless --skip_plot")
    cli.writable_dir(args.save_json, "--save_json")
    if not args.skip_plot:
        cli.writable_dir(args.plot_path, "--plot_path")
    check_model_path(args.model)
    cli.require(0 < args.top_p <= 1 and args.temperature > 0, "need 0 < --top_p <= 1 and --temperature > 0")
    return args


def select_rows(args) -> tuple[list[dict], list[int]]:
    """The T rows used (after the optional seeded subsample) and their random-stream keys."""
    rows = load_rows(args.oracle_table, required=("prompt", "ground_truth", "V_oracle"))
    keys = row_keys(rows)
    order = selection(len(rows), args.T, args.seed, args.subsample_prompts)
    if args.T > len(order):
        print(f"note: --T {args.T} > {len(order)} rows available; using all {len(order)}", file=sys.stderr)
    chosen = [rows[i] for i in order]
    for check in (check_prompts, check_integer_answers, check_oracle_values):
        check(chosen, args.oracle_table)
    return chosen, [keys[i] for i in order]


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world, device = dist.init_from_env(args.device)
    rows, keys = select_rows(args)
    model, tokenizer = load_policy(args.model, device, args.dtype, args.revision, args.trust_remote_code)
    lengths = [len(prompt_ids(tokenizer, row["prompt"])) for row in rows]  # fails before any file is written
    check_prompt_lengths(lengths, args.max_new_tokens, model_positions(model), args.oracle_table)
    config = {**vars(args), "device": device, "world_size": world,
              "oracle_table_fingerprint": fingerprint(args.oracle_table)}
    base = job.find_resumable(args.save_json, config) if args.resume and rank == 0 else None
    if rank == 0 and base is None:
        if args.resume:
            print(f"note: no unfinished run in {args.save_json}; starting a new one", file=sys.stderr)
        os.makedirs(args.save_json, exist_ok=True)
        base = job.new_base(args.save_json, model_tag(args.model))
    base = dist.broadcast_text(base)
    progress = f"{base}.progress.rank{rank}.jsonl"
    run_lock = lock(progress)  # noqa: F841 - held until the process ends: one writer per progress file
    done, batches = job.load_progress(base)
    if os.path.getsize(progress) == 0:
        append_jsonl(progress, {"config": config})
    sampler = job.Sampler(model, tokenizer, eos_token_ids(model, tokenizer), args.temperature, args.top_p,
                          args.max_new_tokens, args.gen_bs, args.seed, include_eos=not args.drop_eos,
                          shared_prompt=args.engine == "fast", vllm=cli.make_vllm(args, device))
    with_advisor = not args.no_advisor and {"grpo", "oracleV"} <= set(args.estimators)
    all_batches = job.prompt_batches(len(rows), args.c1_batch)
    mine = dist.shard(list(range(len(all_batches))), rank, world)
    if done:
        print(f"resuming {base}: {len(done)} prompt results already done", file=sys.stderr)
    records_by_k, batches_by_k = {}, {}
    for k in cli.progress(args.K_list, desc="K", disable=rank > 0):
        bar = cli.progress(total=sum(len(all_batches[b]) for b in mine), desc=f"K={k} prompts", leave=False,
                           disable=rank > 0)

        def show_running_means(k=k, bar=bar):
            finished = [r for (rk, _), r in done.items() if rk == k]
            bar.update(1)
            if finished:
                bar.set_postfix({n[:6]: f"{sum(r['tr_cov'][n] for r in finished) / len(finished):.3g}"
                                 for n in args.estimators})
        for b in mine:
            job.run_batch(sampler, rows, keys, b, all_batches[b], k, args, done, batches, progress,
                          with_advisor, show_running_means)
        bar.close()
        dist.barrier()
        latest_done, latest_batches = job.load_progress(base)
        done.update(latest_done)
        batches.update(latest_batches)
        records_by_k[k] = [r for (rk, _), r in done.items() if rk == k]
        batches_by_k[k] = [r for (rk, _), r in batches.items() if rk == k]
        if rank == 0:
            write_json(f"{base}_K{k}_detailed.json", job.detailed(records_by_k[k], k, args.estimators))
    if rank == 0:
        result = job.summary(records_by_k, args.K_list, args.estimators, config)
        if with_advisor:
            from grpo_mse.analysis.advisor import advise

            result["group_size_advisor"] = advise(records_by_k, batches_by_k, seed=args.seed)
        write_json(f"{base}.json", result)
        all_records = [r for k in args.K_list for r in records_by_k[k]]
        write_csv(f"{base}_per_prompt.csv", job.tidy_rows(all_records, args.estimators), job.TIDY_COLUMNS)
        if not args.skip_plot:
            from grpo_mse.figures.tracecov import plot_run

            png = plot_run(result, os.path.join(args.plot_path, os.path.basename(base) + ".png"))
            print(f"plot: {png}")
        for i, k in enumerate(args.K_list):
            print(f"K={k:4d}  " + "  ".join(f"{n}={result['conditional_on_x'][n][i]:.4g}"
                                          f"±{result['ci95'][n][i]:.2g}" for n in args.estimators))
        advice = result.get("group_size_advisor")
        if advice:
            pooled, ci = advice["pooled"], advice["ci95"]
            star = f"{pooled['K_star']:.3g}" if pooled["K_star"] else "undefined (c1 or c3 <= 0)"
            print(f"group-size advisor: c1={pooled['c1']:.3g} c2={pooled['c2']:.3g} c3={pooled['c3']:.3g} "
                  f"K*=sqrt(c3/c1)={star} (95% CI {ci['K_star']})")
        print(f"results: {base}.json")
    dist.barrier()
    if rank == 0:
        for path in job.progress_paths(base):
            os.remove(path)
    dist.finish()


if __name__ == "__main__":
    cli.run(main, resume_hint="rerun the same command with --resume to continue")
