"""This machine's limits for one model, and the floors they set for sampling and gradients.

Measured here, on one thread by default (the time of the best of --repeats):
- matrix-product throughput at the model's linear shapes (hidden -> q/o, k/v, MLP up/gate, MLP down, vocabulary
  head), for decode batches of --batches rows and for a forward pass of --tokens rows, in fp32 and bf16;
- memory bandwidth: reading a --stream_mb tensor (sum) and copying it (read + write); the system time of touching its
  fresh pages the first time (a run's floor for system time: its page faults times this, per GiB).
Floors derived from them (a floor is what the measured limits allow, not a prediction):
- one decode step at batch B: max(weights' bytes / read bandwidth, 2 P B flops / the decode matmul rate at B);
- one group's forward + two VJPs over N tokens: 2 P N flops forward, 4 P N each VJP (input and weight
  gradients), at the forward-shape matmul rate; plus writing the two P-sized gradients at copy bandwidth.
P counts the linear layers' weights (attention, MLP, vocabulary head): the matrix work of every token.

  python scripts/bench_floor.py --model "$(python scripts/real_llm.py)" --out results/benchmarks/cpu_floor_smollm2.json
"""

import json
import resource
import time
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json

DTYPES = ("fp32", "bf16")


@dataclass(kw_only=True)
class BenchFloorConfig(Flags):
    """The model whose shapes are measured, the batch and token counts, the repeats and the output."""

    model: str = option(help="policy path (its config gives the shapes; e.g. python scripts/real_llm.py)")
    batches: list[int] = option([1, 8, 16, 32, 64, 128], minimum=1, help="decode batch sizes")
    tokens: int = option(256, minimum=1, help="rows of the forward-pass products (a group's tokens)")
    group_tokens: int = option(128, minimum=1, help="tokens of one group for the forward + VJPs floor")
    stream_mb: int = option(512, minimum=1, help="MB of the bandwidth test tensor")
    repeats: int = option(5, minimum=1, help="timings per measurement; the best is kept")
    threads: int = option(1, minimum=1, help="torch threads")
    out: str | None = option(None, help="write the report as JSON here")


def best_seconds(function, repeats: int) -> float:
    function()  # warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def linear_shapes(config) -> dict[str, tuple[int, int, int]]:
    """name -> (in features, out features, how many such layers in the model)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    return {
        "q_o": (hidden, hidden, 2 * layers),
        "k_v": (hidden, kv, 2 * layers),
        "mlp_up_gate": (hidden, config.intermediate_size, 2 * layers),
        "mlp_down": (config.intermediate_size, hidden, layers),
        "vocab_head": (hidden, config.vocab_size, 1),
    }


def matmul_rates(shapes, rows: int, dtype, repeats: int) -> dict:
    """GFLOP/s of x [rows, in] @ W^T per shape, and of the whole model's linear work at this row count."""
    import torch

    out, total_flops, total_seconds = {}, 0.0, 0.0
    for name, (fan_in, fan_out, count) in shapes.items():
        x = torch.randn(rows, fan_in).to(dtype)
        w = torch.randn(fan_out, fan_in).to(dtype)
        seconds = best_seconds(lambda x=x, w=w: torch.nn.functional.linear(x, w), repeats)
        flops = 2.0 * rows * fan_in * fan_out
        out[name] = {"gflops": flops / seconds / 1e9, "seconds": seconds}
        total_flops += flops * count
        total_seconds += seconds * count
    out["model"] = {"gflops": total_flops / total_seconds / 1e9, "seconds": total_seconds}
    return out


def bandwidth(megabytes: int, repeats: int) -> dict:
    import torch

    before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    x = torch.ones(megabytes * (1 << 20) // 4)  # fresh pages: the kernel faults in and zeroes each one
    first_touch = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before
    y = torch.empty_like(x)
    nbytes = x.numel() * 4
    read = best_seconds(lambda: x.sum(), repeats)
    copy = best_seconds(lambda: y.copy_(x), repeats)
    return {
        "read_gb_s": nbytes / read / 1e9,
        "copy_gb_s": 2 * nbytes / copy / 1e9,
        "first_touch_system_s_per_gib": first_touch / (nbytes / 2**30),
        "bytes": nbytes,
    }


def main(argv=None) -> None:
    args = BenchFloorConfig.from_argv(argv, description=__doc__)
    import torch

    from grpo_mse.policy.loading import load_policy

    torch.set_num_threads(args.threads)
    model, _ = load_policy(args.model, "cpu", "fp32")
    shapes = linear_shapes(model.config)
    params = sum(fan_in * fan_out * count for fan_in, fan_out, count in shapes.values())
    all_params = sum(p.numel() for p in model.parameters())
    del model
    memory = bandwidth(args.stream_mb, args.repeats)
    report = {
        "model": args.model,
        "threads": args.threads,
        "linear_params": params,
        "all_params": all_params,
        "bandwidth": memory,
        "decode": {},
        "forward": {},
        "floors": {},
    }
    for name in DTYPES:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
        element = torch.empty((), dtype=dtype).element_size()
        decode = {b: matmul_rates(shapes, b, dtype, args.repeats) for b in args.batches}
        forward = matmul_rates(shapes, args.tokens, dtype, args.repeats)
        report["decode"][name] = {str(b): rates for b, rates in decode.items()}
        report["forward"][name] = forward
        weights_seconds = params * element / (memory["read_gb_s"] * 1e9)
        steps = {}
        for b, rates in decode.items():
            compute = 2.0 * params * b / (rates["model"]["gflops"] * 1e9)
            floor = max(weights_seconds, compute)
            steps[str(b)] = {
                "step_seconds": floor,
                "per_sequence_token_seconds": floor / b,
                "measured_matmuls": rates["model"]["seconds"],
            }
        n = args.group_tokens
        gradient_flops = (2.0 + 2 * 4.0) * params * n
        group = gradient_flops / (forward["model"]["gflops"] * 1e9) + 2 * all_params * 4 / (memory["copy_gb_s"] * 1e9)
        report["floors"][name] = {
            "weights_read_seconds": weights_seconds,
            "decode_step": steps,
            "group_forward_two_vjps": {"tokens": n, "seconds": group, "flops": gradient_flops},
        }
        rate = forward["model"]["gflops"]
        print(
            f"{name}: weights read {weights_seconds * 1e3:.1f} ms; forward matmuls {rate:.1f} GFLOP/s; "
            f"group of {n} tokens (forward + 2 VJPs) >= {group:.2f} s"
        )
        for b, step in steps.items():
            rate = decode[int(b)]["model"]["gflops"]
            print(f"  decode batch {b}: step >= {step['step_seconds'] * 1e3:.1f} ms ({rate:.1f} GFLOP/s)")
    print(json.dumps(report["bandwidth"]))
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    cli.run(main)
