"""Command-line helpers shared by the scripts: one-line errors, progress bars."""

from __future__ import annotations

import sys


class InputError(ValueError):
    """Input that cannot work (a flag, a data file, a model); the message is one line."""


class UsageError(InputError):
    """A flag value that cannot work; the message is one line."""


def require(condition: bool, message: str) -> None:
    """Raise UsageError(message) unless ``condition``."""
    if not condition:
        raise UsageError(message)


def progress(items=None, **kwargs):
    """A tqdm bar on stderr (quiet when not a terminal only if the caller disables it)."""
    from tqdm.auto import tqdm

    return tqdm(items, dynamic_ncols=True, **kwargs)


def add_model_flags(parser, model: str | None, device: str, dtype: str,
                    model_help: str = "hub id or local folder") -> None:
    """--model (required when ``model`` is None), --revision, --device, --dtype, --trust_remote_code."""
    parser.add_argument("--model", default=model, required=model is None, help=model_help)
    parser.add_argument("--revision", default="main")
    parser.add_argument("--device", default=device)
    parser.add_argument("--dtype", default=dtype, choices=["fp16", "bf16", "fp32"])
    parser.add_argument("--trust_remote_code", action="store_true", help="allow the model's own code (off by default)")


def make_vllm(config, device: str):
    """A VLLMSampler when ``config.backend`` is vllm, else None (``config``: a ModelConfig)."""
    if config.backend != "vllm":
        return None
    require(device.startswith("cuda"), "--backend vllm needs --device cuda")
    from grpo_mse.policy.vllm_sampler import VLLMSampler

    return VLLMSampler(config.model, config.dtype, config.seed, config.vllm_gpu_util, config.trust_remote_code,
                       config.revision)


def run(main) -> None:
    """Call ``main()``; turn expected input errors into one line on stderr and exit status 2."""
    try:
        main()
    except (InputError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
