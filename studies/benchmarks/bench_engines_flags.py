"""Reference engine (three backward passes, Welford, prompt recomputed per sequence) against the fast
engine (two backward passes, running sums, the prompt once per pass of groups) on the SAME sampled
continuations.

Prints, per case and side by side: gradient-phase time of each engine and their ratio, end-to-end
time per prompt (sampling included) and its ratio, statistics memory, the largest relative
difference between the engines' per-prompt traces, and each engine's largest relative error against
the reference engine run on a float64 copy of the model (the fp32 rounding floor of both), where the
two engines agree to about 1e-7 (HF's RMSNorm computes in float32 even in a float64 model).

  python scripts/bench_engines.py                     # built-in policy, zero-shot and few-shot, CPU
  python scripts/bench_engines.py --qwen_shapes --device cuda --dtype bf16   # GPU: Qwen2.5-0.5B shapes
  python scripts/bench_engines.py --qwen_shapes 1.5B --device cuda --dtype bf16

Before any work it estimates the memory (model, gradients, each engine's statistics; grpo_mse.gradients.memory)
and refuses with one line when that exceeds the machine's (available host memory, or free GPU memory). One
engine's statistics are freed before the other engine runs (and before each repeat), so the peak is the model
plus the larger engine, not both.

This module holds the benchmark's flags (no torch: --help and a wrong flag answer at once); its body is
bench_engines.py.
"""

import os
from dataclasses import dataclass

from grpo_mse.flags import Flags, option
from studies.benchmarks.qwen_shapes import QWEN2_5_SHAPES
from studies.command_line import device_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root


@dataclass(kw_only=True)
class BenchEnginesConfig(Flags):
    """The model (or Qwen2.5-shaped random weights), the cases and their sizes, the repeats, the output."""

    model: str = option(os.path.join(ROOT, "assets", "tiny_policy"), help="local model folder or hub id")
    qwen_shapes: str | None = option(
        None,
        nargs="?",
        const="0.5B",
        choices=sorted(QWEN2_5_SHAPES),
        help="random model with Qwen2.5's shapes at this size (no value: 0.5B; toy: Qwen's vocabulary and layout "
        "at a tiny width, for CPU checks)",
    )
    device: str = option("cpu", type=device_name, help="cpu, cuda, cuda:N or mps")
    dtype: str = option("fp32", choices=["fp16", "bf16", "fp32"], help="model weights' dtype")
    cases: list[str] = option(["zero_shot", "few_shot"], choices=["zero_shot", "few_shot"], help="built-in prompt sets")
    T: int = option(3, minimum=1, help="prompts per case")
    M: int = option(8, minimum=2, help="groups per prompt")
    K_list: list[int] = option([2, 4, 8, 16], minimum=2, help="group sizes")
    max_new_tokens: int = option(32, minimum=1, help="tokens per continuation")
    groups_per_pass: int = option(0, minimum=0, help="fast engine's groups per pass (0 = auto)")
    repeats: int = option(3, minimum=1, help="time each engine this many times, keep the fastest")
    float64_check: bool | None = option(
        None,
        help="also run the reference engine on a float64 copy of the model and report each engine's "
        "largest relative trace error against it (default: on, except with --qwen_shapes)",
    )
    out: str | None = option(None, help="also write the results as JSON here")
