"""GPU sizing: the memory plan run_tracecov.py would print for Qwen2.5-0.5B, 1.5B and 7B shapes on one GPU of
--gpu_gb, from the shapes alone (meta tensors: no weights, no GPU, seconds on a laptop).

--tracecov_flags holds run_tracecov.py's flags of the run (default: its own defaults at --dtype bf16 on cuda); the
flags the plan sets itself (SET_BY_THE_PLAN: the model, device, backend, files) are refused, not ignored.
For each shape it prints the plan line the run would print, then whether it fits; when it does not, the first of
the flags that lower the essentials (--no_advisor; then one estimator) with which it fits, or the essentials'
size when none does (a larger GPU, or a smaller model, is then needed: the run keeps whole gradients on one GPU).

  python scripts/memory_plan.py --gpu_gb 80 --tracecov_flags "--M 8 --K_list 4 8 16" --out plan.json

The model's weights count as held; CUDA's own context (about CUDA_CONTEXT_GB) is taken off the GPU's memory
before the plan; the activations are sized for prompts of --prompt_tokens tokens.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import UsageError, require
from grpo_mse.flags import Flags, option
from studies.benchmarks.qwen_shapes import QWEN2_5_SHAPES

CUDA_CONTEXT_GB = 0.6  # what a CUDA context and the allocator's first blocks take before any tensor (measured ~0.5)
# the flags tried in turn when the asked run does not fit: each lowers the essentials (running sums, c1 vectors)
LADDER = ([], ["--no_advisor"], ["--no_advisor", "--estimators", "oracleV"])


# run_tracecov.py flags whose value the plan sets itself: given in --tracecov_flags they would be ignored (a plan
# for --model foo that is Qwen's), so they are refused, naming what decides instead
SET_BY_THE_PLAN = {
    **dict.fromkeys(("--model", "--revision", "--trust_remote_code"), "the model is each of --qwen_shapes"),
    **dict.fromkeys(("--device", "--max_memory_gb"), "the plan is for one GPU of --gpu_gb"),
    **dict.fromkeys(
        ("--backend", "--vllm_gpu_util", "--vllm_enforce_eager", "--vllm_max_model_len"),
        "the plan is the hf sampler's (vLLM's own share of the GPU is not in it)",
    ),
    **dict.fromkeys(
        ("--oracle_table", "--save_json", "--plot_path", "--skip_plot", "--resume"), "the plan reads and writes no file"
    ),
}


def run_flags(text: str) -> list[str]:
    """--tracecov_flags split as a shell would; UsageError for an unbalanced quote or a flag the plan sets itself."""
    try:
        words = shlex.split(text)
    except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"--tracecov_flags {text!r}: {error}; give the flags as one balanced shell string") from None
    for word in words:
        flag = word.split("=", 1)[0]
        require(
            flag not in SET_BY_THE_PLAN,
            f"--tracecov_flags: {flag} is not used by the plan ({SET_BY_THE_PLAN.get(flag)}); leave it out",
        )
    return words


@dataclass(kw_only=True)
class MemoryPlanConfig(Flags):
    """The GPU, the model shapes, the run's run_tracecov.py flags and the output."""

    gpu_gb: float = option(80.0, minimum=1, help="the GPU's memory in GB (1e9 bytes)")
    qwen_shapes: list[str] = option(["0.5B", "1.5B", "7B"], choices=sorted(QWEN2_5_SHAPES), help="model shapes")
    tracecov_flags: str = option("", help='run_tracecov.py flags of the run, in one string (e.g. "--M 8 --K_list 4 8")')
    prompt_tokens: int = option(160, minimum=1, help="the longest prompt's tokens")
    out: str | None = option(None, help="also write the plans as JSON here")

    def __post_init__(self) -> None:
        super().__post_init__()
        run_flags(self.tracecov_flags)


def tracecov_config(flags: list[str], extra: list[str]):
    """The run's settings as run_tracecov.py would read them (no file is read or written)."""
    from grpo_mse.config.gradient_evaluation import TracecovConfig

    base = ["--oracle_table", "plan.jsonl", "--skip_plot", "--device", "cuda", "--dtype", "bf16"]
    where = ["--save_json", os.path.join(tempfile.gettempdir(), "memory_plan")]
    return TracecovConfig.from_argv(base + where + flags + extra)


def plan_for(size: str, flags: list[str], extra: list[str], gpu_bytes: int, prompt_tokens: int):
    """(the plan, the run's settings) for Qwen2.5-``size`` with ``flags`` and ``extra``."""
    import torch
    from transformers import Qwen2ForCausalLM

    from grpo_mse.gradients import memory, memory_plan
    from studies.benchmarks.memory_estimates import model_bytes
    from studies.benchmarks.qwen_shapes import qwen2_5_config

    config = tracecov_config(flags, extra)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.dtype]
    model_config = qwen2_5_config(size)
    with torch.device("meta"):  # shapes only
        params = list(Qwen2ForCausalLM(model_config).to(dtype).parameters())  # a tied embedding once
    held = model_bytes(params)
    context = int(CUDA_CONTEXT_GB * memory.GB)
    shape = memory_plan.run_shape(params, config.run_sizes(), model_config, prompt_tokens)
    plan = memory_plan.plan_run(shape, held, gpu_bytes - context - held, "on the GPU after the CUDA context")
    return plan, sum(p.numel() for p in params)


def main(argv=None) -> None:
    args = MemoryPlanConfig.from_argv(argv, description=__doc__)
    flags = run_flags(args.tracecov_flags)
    gpu_bytes = int(args.gpu_gb * 1e9)
    tracecov_config(flags, [])  # a wrong run flag is refused before any model is built
    records = []
    for size in args.qwen_shapes:
        tried = [(extra, *plan_for(size, flags, extra, gpu_bytes, args.prompt_tokens)) for extra in LADDER]
        plan, count = tried[0][1], tried[0][2]
        print(f"Qwen2.5-{size} ({count / 1e9:.3g}B parameters) on {args.gpu_gb:g} GB: {plan.line()}")
        fitting = next((extra for extra, p, _ in tried if p.fits()), None)
        if fitting == []:
            verdict = "fits"
        elif fitting is not None:
            verdict = f"fits with {' '.join(fitting)}"
        else:
            least = min(p.held + p.essential for _, p, _ in tried)
            verdict = f"does not fit: at least {least / 1e9:.3g} GB even with {' '.join(LADDER[-1])}"
        print(f"  -> {verdict}")
        records.append(
            {
                "shape": size,
                "parameters": count,
                "gpu_gb": args.gpu_gb,
                "flags": flags,
                "fits_as_asked": plan.fits(),
                "fits_with": fitting,
                "plans": [
                    {
                        "extra_flags": extra,
                        "needed_bytes": p.needed,
                        "essential_bytes": p.held + p.essential,
                        "kept_rows": p.kept_rows,
                        "c1_in_memory": p.c1_in_memory,
                        "fits": p.fits(),
                        "line": p.line(),
                    }
                    for extra, p, _ in tried
                ],
            }
        )
    if args.out:
        from grpo_mse.tables.outputs import write_json

        write_json(args.out, {"cuda_context_gb": CUDA_CONTEXT_GB, "prompt_tokens": args.prompt_tokens, "runs": records})


if __name__ == "__main__":
    cli.run(main)
