"""Safe resumption and concurrent runs: input fingerprints, settings comparison, unique names, file locks."""

from __future__ import annotations

import fcntl
import hashlib
import os

from grpo_mse.cli import UsageError
from grpo_mse.tables.inputs import looks_local


def fingerprint(source: str) -> str:
    """``sha256:<hex>`` of a local file (of every file, by relative path, for a folder); ``hub:<id>`` otherwise."""
    path = os.path.expanduser(source)
    if not looks_local(source) or not os.path.exists(path):
        return f"hub:{source}"
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names)
    digest = hashlib.sha256()
    for name in files:
        if files != [path]:
            digest.update(os.path.relpath(name, path).encode() + b"\0")
        with open(name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def differences(saved: dict, current: dict, keys) -> list[str]:
    """``key (saved X, now Y)`` for every key whose value differs."""
    return [f"{key} (saved {saved.get(key)!r}, now {current.get(key)!r})" for key in keys
            if saved.get(key) != current.get(key)]


def choose(candidates: list[tuple[str, dict | None]], current: dict, keys, flag: str = "--resume") -> str | None:
    """The newest candidate ``(path, saved settings)`` whose settings equal ``current`` on ``keys``.

    None when there is no candidate; a UsageError naming what differs from the newest one when none
    matches (never a silent new run, append or merge)."""
    for path, saved in reversed(candidates):
        if saved is not None and not differences(saved, current, keys):
            return path
    if not candidates:
        return None
    path, saved = candidates[-1]
    if saved is None:
        raise UsageError(f"cannot {flag} {path}: it records no settings to check; run without {flag}")
    raise UsageError(f"cannot {flag} {path}: settings differ: {'; '.join(differences(saved, current, keys))}; "
                     f"run without {flag} for a new run")


def claim(stem: str, suffix: str, taken=lambda candidate: False) -> str:
    """Create ``stem + suffix`` exclusively (``stem_2``, ``stem_3``, ... when taken) and return the stem used.

    Two processes started in the same second never share a name; ``taken(candidate_stem)`` may
    reject a stem whose other outputs already exist."""
    for attempt in range(1, 10000):
        candidate = stem if attempt == 1 else f"{stem}_{attempt}"
        if taken(candidate):
            continue
        try:
            os.close(os.open(candidate + suffix, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return candidate
    raise UsageError(f"cannot find a free output name near {stem}")


def lock(path: str):
    """Hold an exclusive lock on ``path`` (created if missing) until the returned handle is closed or the
    process ends; another process already holding it is a UsageError."""
    handle = open(path, "a", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise UsageError(f"another process is writing {path}; wait for it to finish or use another "
                         "output folder") from None
    return handle
