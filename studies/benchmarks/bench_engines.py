"""The body of scripts/bench_engines.py: the reference engine against the fast one on the same sampled
continuations (what it prints and why: ``bench_engines_flags``, whose flags it takes)."""

import copy
import os
import time

import torch

from grpo_mse import cli
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients import memory
from grpo_mse.gradients.engine import prompt_traces
from grpo_mse.gradients.statistics import block_coordinates, block_plan
from grpo_mse.gradients.trace_engines import EngineSettings
from grpo_mse.gradients.trace_engines import fast as fast_engine
from grpo_mse.policy.loading import eos_token_ids, load_policy
from grpo_mse.policy.logprobs import PromptSampler
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.policy.sampling import SamplingSettings
from grpo_mse.rewards.rules import row_reward
from grpo_mse.tables.inputs import load_rows
from grpo_mse.tables.outputs import write_json
from grpo_mse.tables.records import V_ORACLE, oracle_value
from studies.benchmarks import bench_engines_flags
from studies.benchmarks import memory_estimates as estimates
from studies.benchmarks.bench_engines_flags import ROOT, BenchEnginesConfig

# The engines agree when their per-prompt traces differ by at most this (relative) in the model's dtype: both
# compute the same gradients, rounded in another order (fp32: ~1e-6 measured; bf16 keeps 8 significant bits).
AGREE_RTOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}


def qwen_shaped_model(device: str, dtype: str, seed: int = 0, size: str = "0.5B"):
    """A randomly initialised model with Qwen2.5-``size``'s shapes (no download); device "meta" holds no memory."""
    from transformers import Qwen2ForCausalLM

    from grpo_mse.policy.loading import DTYPES
    from studies.benchmarks.qwen_shapes import qwen2_5_config

    config = qwen2_5_config(size)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(DTYPES[dtype]).eval()
    return model


def memory_needed(params, device: str, groups_per_pass: int, with_model: bool, groups: int = 64) -> dict:
    """Bytes each engine needs for ``params`` (and the model's own bytes when ``with_model``): the estimate
    checked before any work (grpo_mse.gradients.memory)."""
    labels = len(est.UNBIASED)  # the statistics prompt_traces keeps for est.UNBIASED (no std-GRPO helper)
    step = min(groups, memory.groups_per_pass(2, sum(p.numel() for p in params), groups_per_pass))
    needed = {
        "model": estimates.model_bytes(params) if with_model else 0,
        "fast": estimates.engine_bytes(params, "fast", labels, rows=2 * step, device=device),
        "reference": estimates.engine_bytes(params, "reference", labels, device=device),
    }
    needed["peak"] = needed["model"] + max(needed["fast"], needed["reference"])
    return needed


def check_memory(params, args, float64_check: bool, with_model: bool) -> dict:
    """Print the memory estimate in one line; UsageError (exit 2) when the machine has less."""
    needed = memory_needed(params, args.device, args.groups_per_pass, with_model, args.M)
    if float64_check:  # a float64 copy of the model and its engines' statistics, run after the timings
        doubled = [torch.empty(p.shape, dtype=torch.float64, device="meta") for p in params]
        needed["float64_check"] = (
            estimates.model_bytes(doubled) + memory_needed(doubled, "cpu", 0, False, args.M)["peak"]
        )
        needed["peak"] += needed["float64_check"]
    print(estimates.require_fits(needed["peak"], args.device, "memory estimate (model + the larger engine)"))
    return needed


def peak_device_bytes(device: str) -> int | None:
    """The largest GPU memory allocated since the last reset (None off CUDA)."""
    return torch.cuda.max_memory_allocated(torch.device(device)) if device.startswith("cuda") else None


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(torch.device(device))


class PromptOnlyTokenizer:
    """The built-in tokenizer for prompts; continuations of a random 151936-token model decode to ""."""

    def __init__(self, tokenizer):
        self.inner = tokenizer
        self.chat_template, self.eos_token_id, self.pad_token_id = (
            tokenizer.chat_template,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
        )

    def apply_chat_template(self, *args, **kwargs):
        return self.inner.apply_chat_template(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.inner(*args, **kwargs)

    def batch_decode(self, sequences, **kwargs):
        return [""] * len(sequences)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def blocks_per_gram(vectors: list[list[torch.Tensor]], block: int | None = None) -> int:
    """How many float64 blocks (matrix products) ``gram64`` runs for these vectors."""
    count, device, sizes = len(vectors), vectors[0][0].device, [t.numel() for t in vectors[0]]
    return len(block_plan(sizes, block or block_coordinates(count, device, sum(sizes))))


class PassCounter:
    """Counts the fast engine's passes (one float64 Gram matrix each, ``fast.add_pass``) and their float64
    blocks while installed as ``fast.gram64``."""

    def __init__(self):
        self.passes = self.blocks = 0
        self.inner = fast_engine.gram64

    def __call__(self, vectors, block=None, rows=None):
        self.passes += 1
        self.blocks += blocks_per_gram(vectors, block)
        return self.inner(vectors, block, rows)

    def __enter__(self):
        fast_engine.gram64 = self
        return self

    def __exit__(self, *exc):
        fast_engine.gram64 = self.inner


def float64_errors(checks, samplers_float64: dict[str, PromptSampler]) -> tuple[dict[str, float], float]:
    """Each fp32 engine's largest relative trace error against the reference engine in float64, and the
    largest relative difference between the two engines in float64, over (ids, groups, rewards, V, traces)."""
    errors, worst = {"fast": 0.0, "reference": 0.0}, 0.0
    for ids, groups, rewards, value, traces in checks:
        exact = {
            name: prompt_traces(
                sampler.logprob_fn(ids),
                list(sampler.model.parameters()),
                groups,
                rewards,
                value,
                est.UNBIASED,
                EngineSettings(name),
            ).traces
            for name, sampler in samplers_float64.items()
        }
        for name, n in ((name, n) for name in errors for n in est.UNBIASED):
            scale = max(abs(exact["reference"][n]), 1e-30)
            errors[name] = max(errors[name], abs(traces[name][n] - exact["reference"][n]) / scale)
            worst = max(worst, abs(exact["fast"][n] - exact["reference"][n]) / scale)
    return errors, worst


def run_case(
    model,
    sampler_fast: PromptSampler,
    sampler_ref: PromptSampler,
    rows,
    args,
    device: str,
    samplers_float64: dict[str, PromptSampler] | None = None,
) -> dict:
    """Time both engines on identical samples for every prompt and K; compare their traces with each
    other and, given ``samplers_float64`` (per engine, on a float64 copy of the model), with the
    reference engine in float64, where the two engines must agree to rounding."""
    params = [p for p in model.parameters() if p.requires_grad]
    times = {"sampling": 0.0, "fast": 0.0, "reference": 0.0}
    by_k = {k: {"fast": 0.0, "reference": 0.0, "mean_length": 0.0} for k in args.K_list}
    worst, stats_bytes, checks, error_vs_float64, worst_float64 = 0.0, {}, [], None, None
    passes = {"fast": 0, "reference": 0}
    blocks = {"fast": 0, "reference": 0}
    peak_bytes = {}
    for index, row in enumerate(rows):
        for k in args.K_list:
            best = float("inf")
            for _ in range(args.repeats):  # deterministic streams: every repeat draws the same samples
                synchronize(device)
                start = time.perf_counter()
                ids, continuations, texts = sampler_fast.draw(row, (k, index), args.M * k)
                synchronize(device)
                best = min(best, time.perf_counter() - start)
            times["sampling"] += best
            rewards = torch.tensor([row_reward(row, t) for t in texts])
            if args.random_rewards:  # a random model never answers right: draw 0/1 rewards instead
                rewards = torch.bernoulli(torch.full((args.M * k,), 0.5), generator=torch.Generator().manual_seed(k))
            groups = [continuations[g * k : (g + 1) * k] for g in range(args.M)]
            by_k[k]["mean_length"] += sum(map(len, continuations)) / len(continuations) / len(rows)
            value = oracle_value(row) if V_ORACLE in row else float(rewards.mean())
            traces = {}
            for name, sampler in (("fast", sampler_fast), ("reference", sampler_ref)):
                best, stats = float("inf"), None
                reset_peak(device)
                for _ in range(args.repeats):  # the minimum over repeats: robust to a busy machine
                    stats = None  # free the last repeat's statistics before the next one allocates its own
                    synchronize(device)
                    start = time.perf_counter()
                    with PassCounter() as counter:
                        stats = prompt_traces(
                            sampler.logprob_fn(ids),
                            params,
                            groups,
                            rewards.view(args.M, k),
                            value,
                            est.UNBIASED,
                            EngineSettings(name, args.groups_per_pass),
                        )
                    synchronize(device)
                    best = min(best, time.perf_counter() - start)
                if name == "fast":
                    passes[name] += counter.passes
                    blocks[name] += counter.blocks
                else:  # one pass per group, each updating every parameter tensor of every estimator
                    passes[name] += args.M
                    blocks[name] += args.M * len(params) * len(stats.accumulators)
                times[name] += best
                by_k[k][name] += best
                peak = peak_device_bytes(device)
                if peak is not None:
                    peak_bytes[name] = max(peak_bytes.get(name, 0), peak)
                traces[name] = stats.traces
                stats_bytes[name] = sum(estimates.statistics_bytes(acc) for acc in stats.accumulators.values())
                del stats  # free this engine's statistics before timing the other (large models)
            for n in est.UNBIASED:
                scale = max(abs(traces["reference"][n]), 1e-30)
                worst = max(worst, abs(traces["fast"][n] - traces["reference"][n]) / scale)
            checks.append((ids, groups, rewards.view(args.M, k), value, traces))
    if samplers_float64:  # after the timings, so that they run undisturbed
        error_vs_float64, worst_float64 = float64_errors(checks, samplers_float64)
    prompts = len(rows)
    return {
        "prompts": prompts,
        "K_list": args.K_list,
        "M": args.M,
        "seconds": times,
        "seconds_by_K": by_k,
        # fast: one pass = a batch of groups through one forward and one batched backward call, blocks = its
        # float64 Gram blocks; reference: one pass = one group, blocks = its per-parameter Welford updates
        "passes": passes,
        "seconds_per_pass": {name: times[name] / max(passes[name], 1) for name in passes},
        "blocks_per_pass": {name: blocks[name] / max(passes[name], 1) for name in passes},
        "gradient_speedup": times["reference"] / times["fast"],
        "end_to_end_speedup": (times["sampling"] + times["reference"]) / (times["sampling"] + times["fast"]),
        "stats_bytes": stats_bytes,
        "peak_gpu_bytes": peak_bytes or None,  # CUDA only: torch.cuda.max_memory_allocated while each engine ran
        "memory_ratio": stats_bytes["fast"] / stats_bytes["reference"],
        "max_rel_diff": worst,
        "traces_agree": worst <= AGREE_RTOL[args.dtype],
        "agree_rtol": AGREE_RTOL[args.dtype],
        "max_rel_error_vs_float64": error_vs_float64,
        "max_rel_diff_float64": worst_float64,
    }


def main(argv=None) -> None:
    run(BenchEnginesConfig.from_argv(argv, description=bench_engines_flags.__doc__))


def run(args: BenchEnginesConfig) -> None:
    """The benchmark of ``args`` (scripts/bench_engines.py parses them before torch loads, then calls this)."""
    args.K_list, args.cases = cli.unique(args.K_list, "--K_list"), cli.unique(args.cases, "--cases")
    if args.out:
        cli.writable_file(args.out, "--out")
    if not args.qwen_shapes:
        check_model_path(args.model)
    float64_check = not args.qwen_shapes if args.float64_check is None else args.float64_check
    torch.manual_seed(0)
    if args.qwen_shapes:  # the estimate on meta tensors first: nothing allocated when it does not fit
        meta = [p for p in qwen_shaped_model("meta", args.dtype, size=args.qwen_shapes).parameters()]
        check_memory(meta, args, float64_check, with_model=True)
        _, tokenizer = load_policy(os.path.join(ROOT, "assets", "tiny_policy"), "cpu", "fp32")
        tokenizer = PromptOnlyTokenizer(tokenizer)
        model = qwen_shaped_model(args.device, args.dtype, size=args.qwen_shapes)
        eos = [tokenizer.eos_token_id]
        args.random_rewards = True
    else:
        model, tokenizer = load_policy(args.model, args.device, args.dtype)
        check_memory([p for p in model.parameters() if p.requires_grad], args, float64_check, with_model=False)
        eos = eos_token_ids(model, tokenizer)
        args.random_rewards = False
    settings = SamplingSettings(tuple(eos), tokenizer.pad_token_id, 1.0, 0.95, args.max_new_tokens)
    common = dict(model=model, tokenizer=tokenizer, settings=settings, gen_bs=256, seed=0)
    fast, reference = PromptSampler(**common, shared_prompt=True), PromptSampler(**common, shared_prompt=False)
    float64 = None
    if float64_check:
        model64 = copy.deepcopy(model).double()
        float64 = {
            name: PromptSampler(**{**common, "model": model64}, shared_prompt=name == "fast")
            for name in ("fast", "reference")
        }
    report = {}
    started = time.perf_counter()
    for case in args.cases:
        rows = load_rows(os.path.join(ROOT, "data", f"arithmetic_{case}.jsonl"))[: args.T]
        report[case] = run_case(model, fast, reference, rows, args, args.device, float64)
        r = report[case]
        print(
            f"[{case}] T={r['prompts']} M={args.M} K={args.K_list}  "
            f"sampling {r['seconds']['sampling']:.1f}s  reference {r['seconds']['reference']:.1f}s  "
            f"fast {r['seconds']['fast']:.1f}s"
        )
        print(
            f"[{case}] gradient phase speed-up x{r['gradient_speedup']:.2f}   end-to-end speed-up "
            f"x{r['end_to_end_speedup']:.2f}   statistics memory fast/reference = {r['memory_ratio']:.2f} "
            f"({r['stats_bytes']['fast'] / 2**20:.1f} / {r['stats_bytes']['reference'] / 2**20:.1f} MiB)   "
            f"max relative trace difference {r['max_rel_diff']:.2e}"
        )
        if r["max_rel_error_vs_float64"]:
            errors = r["max_rel_error_vs_float64"]
            print(
                f"[{case}] largest relative trace error against the reference engine in float64: "
                f"fast {errors['fast']:.2e}   reference {errors['reference']:.2e}   "
                f"(both engines in float64 differ by at most {r['max_rel_diff_float64']:.1e})"
            )
        print(
            f"[{case}] per pass: fast {r['seconds_per_pass']['fast']:.2f}s, "
            f"{r['blocks_per_pass']['fast']:.0f} float64 blocks ({r['passes']['fast']} passes)   reference "
            f"{r['seconds_per_pass']['reference']:.2f}s, {r['blocks_per_pass']['reference']:.0f} parameter updates "
            f"({r['passes']['reference']} passes)"
        )
        for k, t in r["seconds_by_K"].items():
            print(
                f"[{case}]   K={k:<3d} mean continuation length {t['mean_length']:.1f}  "
                f"reference {t['reference']:.2f}s  fast {t['fast']:.2f}s  x{t['reference'] / t['fast']:.2f}"
            )
        if args.out:  # after every case: a run stopped by a time limit keeps the cases it finished
            write_json(
                args.out,
                {
                    "device": args.device,
                    "dtype": args.dtype,
                    "qwen_shapes": args.qwen_shapes,
                    "complete": case == args.cases[-1],
                    "seconds": time.perf_counter() - started,
                    "cases": report,
                },
            )
