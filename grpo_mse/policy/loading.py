"""Load a causal LM and its tokenizer (hub id, local folder or GGUF file), remote code off unless asked."""

from __future__ import annotations

import os

import torch

from grpo_mse.errors import ModelError
from grpo_mse.policy.model_source import ADAPTER, GGUF, ModelSource, resolve

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def resolve_device(device: str) -> torch.device:
    """``cuda``/``cuda:N``/``cpu``/``mps``; a CUDA request without CUDA is a clear error."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"--device {device} requested but CUDA is not available; use --device cpu")
    if device.startswith("cuda") and ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise ModelError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ModelError("--device mps requested but this machine has no MPS (Apple GPU) backend; use --device cpu")
    return torch.device(device)


def model_folder(model: str | ModelSource) -> str:
    """The HF folder (or hub id) to load for ``model``: its name itself, a GGUF file's converted folder, or a LoRA
    adapter folder's merge into its base (itself resolved the same way); both cached after the first use. The
    converter and the merger are imported only for such a model."""
    source = resolve(model)
    if source.kind == GGUF:
        from grpo_mse.policy.gguf_convert import converted_folder

        return converted_folder(source.gguf)
    if source.kind == ADAPTER:
        from grpo_mse.policy.adapters import merged_folder, require_weights

        require_weights(source.name)  # before its base is resolved (a GGUF base is converted)
        return merged_folder(source, model_folder(source.base()))
    return source.name


def load_policy(
    model: str | ModelSource,
    device: str = "cpu",
    dtype: str = "fp32",
    revision: str = "main",
    trust_remote_code: bool = False,
):
    """(model in eval mode on ``device``, tokenizer with a pad token) for ``name``; a GGUF file (or the folder
    holding one) loads from its converted folder (``policy/gguf_convert.py``: converted once, then cached)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    target = resolve_device(device)
    model = resolve(model)
    source, name = model.name, model_folder(model)
    local = os.path.isdir(os.path.expanduser(name))  # a mistyped local folder was refused by the command's config
    kwargs = {"trust_remote_code": trust_remote_code}
    if not local:
        kwargs["revision"] = revision
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=DTYPES[dtype], **kwargs)
    except Exception as error:  # noqa: BLE001 - transformers raises OSError, ValueError, RuntimeError, safetensors
        if (
            not isinstance(error, (OSError, ValueError, RuntimeError))
            and type(error).__module__.split(".")[0] != "safetensors"
        ):
            raise
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if name != source:  # a GGUF file's conversion or an adapter's merge: the cached folder is what failed
            raise ModelError(
                f"cannot load model {source!r} from its cached folder {name}: {first}; remove that folder to build "
                "it again"
            ) from None
        where = "" if local else f" (no local folder {name!r} either)"
        raise ModelError(f"cannot load model {source!r}{where}: {first}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(target).eval()
    return model, tokenizer


def eos_token_ids(model, tokenizer) -> list[int]:
    """All ids that end a sequence: the tokenizer's eos plus the generation config's eos list."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos:
        ids.update(int(i) for i in config_eos)
    if not ids:
        raise ModelError("the model defines no end-of-sequence token")
    return sorted(ids)
