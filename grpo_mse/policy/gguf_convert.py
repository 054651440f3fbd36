"""A GGUF model file as an ordinary HF folder, converted once and cached by the file's sha256.

transformers reads GGUF files (``from_pretrained(folder, gguf_file=name)``, through the ``gguf`` package) and
dequantises them to float32, but its tokenizer converter does not carry the file's special tokens over: on
SmolLM2-135M-Instruct it gives eos ``<|im_start|>`` (id 1) and no pad, where the file says eos 2
(``<|im_end|>``) and pad 2. A sampler that stops on the wrong token, or TRL aligning the model's eos to the
tokenizer's, then changes what is sampled. So the conversion sets bos, eos, pad and unk from the file's own
metadata on the tokenizer, the model config and the generation config, and saves the result once:
every later load is an ordinary ``from_pretrained`` of a folder (seconds, not a dequantisation).

The cache is ``$GRPO_MSE_GGUF_CACHE``, else ``$XDG_CACHE_HOME/grpo_mse/gguf`` (``~/.cache`` by default), never the
repository; each entry is ``<sha256 of the file>/`` with a ``gguf_source.json`` that records where it came from
(``policy/model_cache.py``: one build at a time, leftovers of a killed build removed, damaged entries rebuilt).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from grpo_mse.errors import ModelError, first_line
from grpo_mse.policy.model_cache import cache_root, cached_folder
from grpo_mse.policy.model_source import file_sha256

SOURCE_RECORD = "gguf_source.json"  # written last: a folder without it is an interrupted conversion
# Bumped when the conversion changes what it writes; a cached folder of another version is converted again.
CONVERTER_VERSION = 3  # 3: a head quantised a second time from the tied embedding is tied back (tie_head)
# A separate output.weight this close to token_embd.weight (relative Frobenius distance) is the tied embedding
# quantised twice (Qwen2.5-Coder-0.5B's Q4_K_M file: Q8_0 head, Q5_0 embedding, 4.4% apart); two trained matrices
# of an untied model are about as far apart as their own norms.
TIE_TOLERANCE = 0.1


@dataclass(frozen=True)
class GGUFTokens:
    """The special tokens a GGUF file's metadata names (``tokenizer.ggml.*_token_id``), None when absent."""

    bos: int | None
    eos: int | None
    pad: int | None
    unk: int | None


@dataclass(frozen=True)
class GGUFInfo:
    """What the project reads from a GGUF header: its architecture, its ``general.name`` and special tokens."""

    architecture: str
    name: str | None
    tokens: GGUFTokens


def read_gguf_info(path: str) -> GGUFInfo:
    """The header of the GGUF file at ``path`` (memory-mapped; the tensors are not read)."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, KeyError, IndexError) as error:  # IndexError: a file cut inside its header
        raise ModelError(
            f"{path} is not a readable GGUF file ({os.path.getsize(path)} bytes, cut or damaged: {first_line(error)}); "
            "copy or download it again"
        ) from None

    def field(key: str):
        entry = reader.fields.get(key)
        return None if entry is None else entry.contents()

    def token(kind: str) -> int | None:
        value = field(f"tokenizer.ggml.{kind}_token_id")
        return None if value is None else int(value)

    architecture = field("general.architecture")
    if not isinstance(architecture, str):
        raise ModelError(f"{path} has no general.architecture in its metadata; it is not a model file")
    tokens = GGUFTokens(token("bos"), token("eos"), token("padding"), token("unknown"))
    return GGUFInfo(architecture, field("general.name"), tokens)


def converted_folder(gguf_path: str) -> str:
    """The cached HF folder of the GGUF file at ``gguf_path``, converting it first when it is not cached (its
    metadata is read first then: a cut or damaged file is refused before the cache is touched)."""
    digest = file_sha256(gguf_path)
    folder = os.path.join(cache_root(), digest)
    # The metadata is read only for a conversion: parsing a 150k-token vocabulary takes seconds (5-9 s on Qwen2.5),
    # and a file whose sha256 names a finished conversion was read whole when it was converted.
    info = None if is_current(folder) else read_gguf_info(gguf_path)
    return cached_folder(
        folder, lambda out: _convert(gguf_path, info or read_gguf_info(gguf_path), digest, out), is_current
    )


def is_current(folder: str) -> bool:
    """True when ``folder`` holds a finished conversion made by this version of the converter."""
    try:
        with open(os.path.join(folder, SOURCE_RECORD), encoding="utf-8") as handle:
            return json.load(handle).get("converter_version") == CONVERTER_VERSION
    except (OSError, ValueError, AttributeError):
        return False


def _convert(gguf_path: str, info: GGUFInfo, digest: str, out_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, file = os.path.split(os.path.abspath(gguf_path))
    # stderr: the launcher reads the folder from this module's caller's stdout
    print(f"converting {gguf_path} to an HF folder (once; cached in {cache_root()})", file=sys.stderr, flush=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=file)
        model = AutoModelForCausalLM.from_pretrained(where, gguf_file=file, dtype=torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError, NotImplementedError) as error:
        raise ModelError(f"cannot convert GGUF file {gguf_path} ({info.architecture}): {first_line(error)}") from None
    apply_special_tokens(info, tokenizer, model)
    tied = tie_head(gguf_path, model)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    record = {
        "gguf_file": os.path.abspath(gguf_path),
        "sha256": digest,
        "architecture": info.architecture,
        "general_name": info.name,
        "special_tokens": {"bos": info.tokens.bos, "eos": info.tokens.eos, "pad": info.tokens.pad},
        "converter_version": CONVERTER_VERSION,
        "tied_head": tied,
    }
    with open(os.path.join(out_dir, SOURCE_RECORD), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)


def tie_head(gguf_path: str, model) -> dict | None:
    """Tie the output head back to the input embedding when the file stores both and they are one matrix quantised
    twice (within TIE_TOLERANCE): both then take the more precise copy (more bits per weight), as the original
    model's one tied matrix. Returns what was done ({"relative_difference", "kept"}) or None (nothing to tie)."""
    import gguf
    import torch

    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    if head is None or head.weight is embedding.weight or head.weight.shape != embedding.weight.shape:
        return None
    with torch.no_grad():
        distance = float(torch.linalg.norm(head.weight - embedding.weight) / torch.linalg.norm(embedding.weight))
    if distance > TIE_TOLERANCE:
        return None
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(gguf_path).tensors}

    def bits(name: str) -> float:
        block, size = gguf.GGML_QUANT_SIZES[types[name]]
        return 8 * size / block

    use_head = (
        "output.weight" in types and "token_embd.weight" in types and bits("output.weight") > bits("token_embd.weight")
    )
    kept = "output.weight" if use_head else "token_embd.weight"
    if use_head:
        embedding.weight = torch.nn.Parameter(head.weight.detach().clone())
    model.config.tie_word_embeddings = True
    model.get_output_embeddings().weight = model.get_input_embeddings().weight
    return {"relative_difference": round(distance, 5), "kept": f"{kept} ({types[kept].name})"}


def apply_special_tokens(info: GGUFInfo, tokenizer, model) -> None:
    """Set the file's bos/eos/pad/unk on the tokenizer, model config and generation config; pad falls back to
    eos (as the samplers pad with it), and a token id outside the vocabulary is refused."""
    tokens = info.tokens
    if tokens.eos is None:
        raise ModelError("the GGUF file names no end-of-sequence token (tokenizer.ggml.eos_token_id)")
    pad = tokens.eos if tokens.pad is None else tokens.pad
    for kind, token_id in (("bos", tokens.bos), ("eos", tokens.eos), ("pad", pad), ("unk", tokens.unk)):
        if token_id is None:
            continue
        if not 0 <= token_id < len(tokenizer):
            raise ModelError(f"the GGUF file's {kind} token id {token_id} is outside its vocabulary ({len(tokenizer)})")
        setattr(tokenizer, f"{kind}_token", tokenizer.convert_ids_to_tokens(token_id))
    # transformers' GGUF tokenizers come with clean_up_tokenization_spaces on, which it then ignores for byte-level
    # BPE with a warning on every decode call; off is what it does anyway, without the warning
    tokenizer.clean_up_tokenization_spaces = False
    for config in (model.config, model.generation_config):
        config.eos_token_id = tokens.eos
        config.pad_token_id = pad
        if tokens.bos is not None:
            config.bos_token_id = tokens.bos
