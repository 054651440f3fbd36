"""The package's error types and the one error boundary of every command line.

``InputError`` (and its kinds) means "the user's input cannot work"; its message is one line. ``describe``
turns the failures a library raises on bad input (a full disk, also in safetensors' or tokenizers' own words, a
file that is not UTF-8, a corrupt parquet or safetensors file, a tokenizer or template that cannot load,
malformed YAML or JSON) into one line that names the file and what to do; anything else is a bug and keeps its
traceback. ``require(condition, message)`` raises a UsageError unless the condition holds. Importing this module
is cheap.
"""

from __future__ import annotations

import errno
import json


class InputError(ValueError):
    """Input that cannot work (a flag, a data file, a model); the message is one line."""


class UsageError(InputError):
    """A flag value that cannot work; the message is one line."""


class FieldTypeError(UsageError, TypeError):
    """A config field given a value of the wrong type (``T="4"``, ``M=4.0``, ``estimators="grpo"``) by a library
    caller; a UsageError (one line on a command line) that is also a TypeError."""


class DataError(InputError):
    """Bad input data; the message is one line that names the problem."""


class ModelError(InputError):
    """The model cannot be loaded or used as asked; the message is one line."""


def require(condition: bool, message: str) -> None:
    """Raise UsageError(message) unless ``condition``."""
    if not condition:
        raise UsageError(message)


def first_line(error: BaseException) -> str:
    """The first non-empty line of ``error``'s message (its type name when it has none)."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__


def _library(error: BaseException) -> str:
    return type(error).__module__.split(".")[0]


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
# How libraries that raise no OSError report a full disk: safetensors ("I/O error: No space left on device (os
# error 28)"), tokenizers (a bare Exception with the same text).
FULL_DISK_TEXT = ("No space left on device", "Disk quota exceeded", "(os error 28)", "(os error 122)")


def is_full_disk(error: BaseException) -> bool:
    """True for a full disk (or quota), whether raised as an OSError or in a library's own exception."""
    if isinstance(error, OSError) and error.errno in FULL_DISK:
        return True
    return any(text in str(error) for text in FULL_DISK_TEXT)


def _os_line(error: OSError, resume_hint: str | None) -> str:
    where = f": {error.filename}" if error.filename not in (None, "") else ""
    if error.errno in FULL_DISK:
        return f"no space left on the device{where}; free some space, then {resume_hint or 'rerun the command'}"
    if error.errno == errno.EROFS:
        return f"read-only file system{where}; choose another output folder"
    if error.filename == "":
        return f"{error.strerror or type(error).__name__}: an empty path was given; name a file or folder"
    if error.filename is not None:
        return f"{error.strerror or type(error).__name__}: {error.filename}"
    return first_line(error)


# Packages only some features need (the gradient-evaluation path runs without them): where each comes from
OPTIONAL_PACKAGES = {
    "datasets": "pip install datasets (only hub datasets and saved dataset folders need it; .jsonl/.parquet do not)",
    "vllm": "pip install -r requirements-gpu.txt (only --backend vllm needs it)",
    "verl": "pip install -r requirements-verl.txt (VERL training)",
    "ray": "pip install -r requirements-gpu.txt (VERL training)",
    "trl": "pip install -r requirements-verl.txt (TRL training)",
    "math_verify": "pip install -r requirements-verl.txt (MATH answers)",
    "wandb": "pip install -r requirements-verl.txt (W&B logs)",
    "hydra": "pip install -r requirements-verl.txt (the VERL launcher)",
    "omegaconf": "pip install -r requirements-verl.txt (the VERL launcher)",
}


def missing_package(error: BaseException) -> str | None:
    """One line for an optional package that is not installed, or None."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.split(".")[0]
        if top in OPTIONAL_PACKAGES:
            return f"this needs the package {top!r}, which is not installed: {OPTIONAL_PACKAGES[top]}"
    return None


def describe(error: BaseException, resume_hint: str | None = None) -> str | None:
    """One line for an expected failure on bad input (no ``error:`` prefix), or None for anything else."""
    if isinstance(error, InputError):
        return first_line(error)
    if missing_package(error):
        return missing_package(error)
    if isinstance(error, UnicodeDecodeError):
        return f"an input file is not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8"
    if isinstance(error, json.JSONDecodeError):
        return f"malformed JSON in an input ({error.msg}, line {error.lineno}); repair or regenerate it"
    if is_full_disk(error) and not isinstance(error, OSError):  # written by safetensors or tokenizers
        then = resume_hint or "rerun the command"
        return f"no space left on the device ({first_line(error)}); free some space, then {then}"
    library = _library(error)
    if library == "pyarrow":
        return f"cannot read a parquet/arrow input: {first_line(error)}; is the file complete?"
    if library == "safetensors":
        return f"cannot read the model weights (safetensors): {first_line(error)}; re-download or rebuild the model"
    if library == "jinja2":
        return f"the tokenizer's chat template failed: {first_line(error)}; check the prompt messages' fields"
    if library == "yaml":
        return f"malformed YAML: {first_line(error)}; repair or regenerate the file"
    if isinstance(error, OSError):
        return _os_line(error, resume_hint)
    return None
