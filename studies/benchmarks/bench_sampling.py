"""Throughput of the HF sampling path (grpo_mse.policy.sampling.HFSampler) at growing batch sizes, on a model with
random weights and Qwen2.5's shapes (no download): generated tokens per second at each batch, up to the largest
batch that fits. This is the number to compare with vLLM on a machine that has it.

  python scripts/bench_sampling.py --qwen_shapes 1.5B --device cuda --dtype bf16 --out sampling.json

Batches double from --batch_start while the estimated memory (key/value cache, and the float32 logits the
nucleus sampler sorts) fits what the device has, until --batch_max, an out-of-memory error, or a batch that
would end after --seconds (predicted as 2.5 x the last batch's time).
Every batch samples --max_new_tokens tokens per row (a random model almost never stops early); tokens/s counts
the tokens actually generated. The JSON is rewritten after every batch.
"""

import os
import time
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.gradients import memory
from studies.benchmarks import memory_estimates as estimates
from studies.benchmarks.qwen_shapes import QWEN2_5_SHAPES, qwen2_5_config
from studies.command_line import device_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
LOGIT_BYTES_PER_ENTRY = 24  # float32 logits, their sorted copy and softmax, int64 sort indices


def batch_bytes(config, dtype: str, batch: int, tokens: int) -> int:
    """Bytes one batch needs beyond the weights: the key/value cache of ``tokens`` positions per row,
    2 x layers x kv heads x head dim x tokens x dtype bytes, plus the sampler's logits work per row."""
    head_dim = config.hidden_size // config.num_attention_heads
    cache = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * tokens * DTYPE_BYTES[dtype]
    return batch * (cache + config.vocab_size * LOGIT_BYTES_PER_ENTRY)


@dataclass(kw_only=True)
class BenchSamplingConfig(Flags):
    """The model shapes, the batch sizes to try and for how long, and the output."""

    qwen_shapes: str = option("0.5B", choices=sorted(QWEN2_5_SHAPES), help="model shapes")
    device: str = option("cpu", type=device_name, help="cpu, cuda, cuda:N or mps")
    dtype: str = option("fp32", choices=sorted(DTYPE_BYTES), help="model weights' dtype")
    max_new_tokens: int = option(64, minimum=1, help="tokens per row")
    batch_start: int = option(16, minimum=1, help="first batch size")
    batch_max: int = option(4096, minimum=1, help="largest batch size tried")
    seconds: float = option(60.0, above=0, help="no new batch after this long")
    out: str | None = option(None, help="also write the results as JSON here")


def main(argv=None) -> None:
    args = BenchSamplingConfig.from_argv(argv, description=__doc__)
    if args.out:
        cli.writable_file(args.out, "--out")
    import torch

    from grpo_mse.policy.loading import DTYPES, load_policy
    from grpo_mse.policy.sampling import HFSampler, SamplingSettings
    from grpo_mse.tables.inputs import load_rows, prompt_ids
    from grpo_mse.tables.outputs import write_json

    config = qwen2_5_config(args.qwen_shapes)
    with torch.device("meta"):
        from transformers import Qwen2ForCausalLM

        weights = estimates.model_bytes(list(Qwen2ForCausalLM(config).to(DTYPES[args.dtype]).parameters()))
    _, tokenizer = load_policy(os.path.join(ROOT, "assets", "tiny_policy"), "cpu", "fp32")
    prompt = prompt_ids(tokenizer, load_rows(os.path.join(ROOT, "data", "arithmetic_zero_shot.jsonl"))[0]["prompt"])
    tokens = len(prompt) + args.max_new_tokens
    first = weights + batch_bytes(config, args.dtype, args.batch_start, tokens)
    print(estimates.require_fits(first, args.device, f"memory estimate (weights + batch {args.batch_start})"))
    torch.manual_seed(0)
    with torch.device(args.device):
        model = Qwen2ForCausalLM(config).to(DTYPES[args.dtype]).eval()
    settings = SamplingSettings((-1,), tokenizer.pad_token_id, 1.0, 1.0, args.max_new_tokens)  # no EOS: full rows
    report = {"qwen_shapes": args.qwen_shapes, "device": args.device, "dtype": args.dtype, "batches": []}
    started, batch = time.perf_counter(), args.batch_start
    while batch <= args.batch_max and time.perf_counter() - started < args.seconds:
        available, _ = memory.device_available(args.device)
        needed = batch_bytes(config, args.dtype, batch, tokens)
        if needed > 0.9 * available:
            report["stopped"] = f"batch {batch} needs about {needed / 1e9:.3g} GB, {available / 1e9:.3g} GB free"
            break
        sampler = HFSampler(model, settings, batch)
        try:
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            (rows,) = sampler.sample([(prompt, batch, (0, batch))])
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            report["stopped"] = f"out of memory at batch {batch}"
            break
        seconds = time.perf_counter() - start
        generated = sum(map(len, rows))
        report["batches"].append(
            {"batch": batch, "seconds": seconds, "tokens": generated, "tokens_per_second": generated / seconds}
        )
        print(f"batch {batch}: {generated} tokens in {seconds:.2f} s = {generated / seconds:.0f} tokens/s")
        if args.out:
            write_json(args.out, report)
        batch *= 2
        if time.perf_counter() - started + 2.5 * seconds > args.seconds:  # the next batch takes ~2x this one
            report["stopped"] = f"batch {batch} would end after --seconds {args.seconds:g}"
            break
    report.setdefault("stopped", "batch_max or time limit reached")
    if report["batches"]:
        report["largest_batch"] = report["batches"][-1]["batch"]
        report["best_tokens_per_second"] = max(b["tokens_per_second"] for b in report["batches"])
    print(f"stopped: {report['stopped']}")
    if args.out:
        write_json(args.out, report)
