"""Command-line helpers shared by the scripts: one-line errors, progress bars."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


class UsageError(ValueError):
    """A flag value that cannot work; the message is one line."""


def require(condition: bool, message: str) -> None:
    """Raise UsageError(message) unless ``condition``."""
    if not condition:
        raise UsageError(message)


def progress(items=None, **kwargs):
    """A tqdm bar on stderr (quiet when not a terminal only if the caller disables it)."""
    return tqdm(items, dynamic_ncols=True, **kwargs)


def add_model_flags(parser, model: str | None, device: str, dtype: str,
                    model_help: str = "hub id or local folder") -> None:
    """--model (required when ``model`` is None), --revision, --device, --dtype, --trust_remote_code."""
    parser.add_argument("--model", default=model, required=model is None, help=model_help)
    parser.add_argument("--revision", default="main")
    parser.add_argument("--device", default=device)
    parser.add_argument("--dtype", default=dtype, choices=["fp16", "bf16", "fp32"])
    parser.add_argument("--trust_remote_code", action="store_true", help="allow the model's own code (off by default)")


def add_backend_flags(parser) -> None:
    """--backend hf|vllm and vLLM's memory share (vLLM shares the GPU with the HF model)."""
    parser.add_argument("--backend", default="hf", choices=["hf", "vllm"],
                        help="sampler: hf (our seeded sampler, CPU/GPU) or vllm (GPU only)")
    parser.add_argument("--vllm_gpu_util", type=float, default=0.4, help="vLLM gpu_memory_utilization")


def make_vllm(args, device: str):
    """A VLLMSampler when --backend vllm, else None."""
    if args.backend != "vllm":
        return None
    require(device.startswith("cuda"), "--backend vllm needs --device cuda")
    from grpo_mse.policy.vllm_sampler import VLLMSampler

    return VLLMSampler(args.model, args.dtype, args.seed, args.vllm_gpu_util, args.trust_remote_code, args.revision)


def run(main) -> None:
    """Call ``main()``; turn expected input errors into one line on stderr and exit status 2."""
    from grpo_mse.policy.loading import ModelError
    from grpo_mse.tables.inputs import DataError

    try:
        main()
    except (UsageError, DataError, ModelError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
