"""The cache of converted GGUF files and merged adapters: one folder per entry, built once and read many times.

Where: ``$GRPO_MSE_GGUF_CACHE``, else ``$XDG_CACHE_HOME/grpo_mse/gguf`` (``~/.cache`` by default). An entry is
built in a staging folder (``.tmp_*``) beside it and renamed into place, so a finished entry is never half
written. Around that:

- **one build at a time per folder**: a builder holds an flock on the entry's parent folder; a second process
  that needs an entry waits for it (saying so on stderr) and then uses the entry the first one built, so two runs
  started together convert once, and the first finished entry is the one kept;
- **leftovers**: while it holds the lock, a process removes every ``.tmp_*`` folder in the parent: only a process
  killed mid-build (kill -9, a lost machine) leaves one, and nothing else would remove it;
- **damage**: a finished entry with a file missing or of another size than when it was written (recorded in
  ``cached_files.json``), a JSON file that does not parse, or a weights file shorter or longer than its header
  says, is named on stderr and built again (a byte changed in place is not detected: that needs a hash per load);
- **permissions**: entries take the user's umask like any folder they make (0755 folders and 0644 files under
  the usual 022), so other users can read a shared cache; safetensors writes its files 0600, which is undone;
- **refusals** in one line (ModelError): a cache that cannot be written names where the setting came from (the
  variable, or the default path and the variable that moves it), a full disk names the entry's folder, and an
  empty or blank variable is refused (``cache_refusals`` also serves the Qwen join, ``studies/builders/qwen.py``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import struct
import sys

from grpo_mse.errors import ModelError, first_line, is_full_disk

ENV = "GRPO_MSE_GGUF_CACHE"
STAGING = ".tmp_"  # the prefix of a staging folder (also of those older versions made with tempfile.mkdtemp)
MANIFEST = "cached_files.json"  # written into each entry after its build: every file's size, checked on each use
NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF)  # flock not offered here


def cache_root() -> str:
    """The cache folder (absolute): ``$GRPO_MSE_GGUF_CACHE``, else ``$XDG_CACHE_HOME/grpo_mse/gguf``."""
    value = os.environ.get(ENV)
    if value is not None:
        # Set but empty is refused as blank is: it is most often a script's unset variable (ENV=$SCRATCH), and the
        # default it would fall back to is the disk the user meant to spare (491 MB to 2 GB a model)
        if not value.strip():
            raise ModelError(
                f"{ENV} is blank ({value!r}); unset it (the default is ~/.cache/grpo_mse/gguf) or name a folder"
            )
        return os.path.abspath(os.path.expanduser(value))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "grpo_mse", "gguf")


def cached_folder(folder: str, build, is_done) -> str:
    """``folder`` once ``is_done(folder)`` and undamaged; otherwise ``build(staging)`` writes it in a staging
    folder beside it, renamed into place under the parent's lock (see the module's docstring)."""
    parent = os.path.dirname(folder)
    if is_done(folder) and damage(folder) is None:
        _remove_leftovers_if_idle(parent)
        return folder
    with cache_refusals(folder):
        os.makedirs(parent, exist_ok=True)
        with folder_lock(parent):
            _remove_leftovers(parent)
            if is_done(folder):
                problem = damage(folder)
                if problem is None:
                    return folder  # another process built it while this one waited
                print(f"the cached folder {folder} is damaged ({problem}); building it again", file=sys.stderr)
            staging = _new_staging(parent, os.path.basename(folder))
            try:
                build(staging)
                _write_manifest(staging)
                _umask_modes(staging)
                if os.path.lexists(folder):
                    shutil.rmtree(folder)  # unfinished, outdated or damaged (a finished one returned above)
                os.rename(staging, folder)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return folder


def damage(folder: str) -> str | None:
    """What is wrong with the finished entry ``folder`` (a file missing, cut or grown, a JSON file that does not
    parse), or None. Entries record their files' sizes (MANIFEST); those made before that are checked for their
    config, tokenizer config and weights, their JSON and their safetensors headers only."""
    try:
        names = set(os.listdir(folder))
    except OSError as error:
        return first_line(error)
    sizes, name = {}, MANIFEST
    try:
        if MANIFEST in names:
            sizes = _read_json(folder, MANIFEST)
        name = "model.safetensors.index.json"
        weights = _weight_files(folder, names)
        for name in sorted({"config.json", "tokenizer_config.json", *weights, *sizes}):
            if name not in names:
                return f"{name} is missing"
        for name, size in sorted(sizes.items()):
            actual = os.path.getsize(os.path.join(folder, name))
            if actual != size:
                return f"{name} has {actual} bytes, {size} when it was written"
        for name in sorted(n for n in names if n.endswith(".json")):
            _read_json(folder, name)
        for name in weights:
            problem = _safetensors_problem(os.path.join(folder, name))
            if problem:
                return f"{name} {problem}"
    except (OSError, ValueError, AttributeError, TypeError, KeyError, IndexError) as error:
        return f"{name}: {first_line(error)}"
    return None


def _read_json(folder: str, name: str):
    with open(os.path.join(folder, name), "rb") as handle:
        return json.loads(handle.read())


def _write_manifest(staging: str) -> None:
    """Record the size of every file the build wrote (the entries are flat folders)."""
    sizes = {e.name: e.stat().st_size for e in os.scandir(staging) if e.is_file(follow_symlinks=False)}
    with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(dict(sorted(sizes.items())), handle, indent=1)


def _weight_files(folder: str, names: set) -> list[str]:
    """The entry's safetensors files: those its index names, or model.safetensors."""
    index = "model.safetensors.index.json"
    if index not in names:
        return ["model.safetensors"]
    return sorted(set(_read_json(folder, index)["weight_map"].values()))


def _safetensors_problem(path: str) -> str | None:
    """None when the safetensors file at ``path`` is exactly as long as its header says, else what differs."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"is cut ({size} bytes)"
        (header_bytes,) = struct.unpack("<Q", head)
        if header_bytes > size - 8:
            return f"is cut ({size} bytes, header of {header_bytes})"
        header = json.loads(handle.read(header_bytes))
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_bytes + max(ends, default=0)
    if size != expected:
        return f"has {size} bytes where its header says {expected} ({'cut' if size < expected else 'grown'})"
    return None


@contextlib.contextmanager
def folder_lock(parent: str):
    """Hold an flock on the folder ``parent`` itself for the block (no lock file is left anywhere); wait, saying
    so, while another process holds it. A file system without flock on folders (NFS) runs the block unlocked:
    the rename still keeps every finished entry whole."""
    import fcntl

    handle = os.open(parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process building in {parent}", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as error:
            if error.errno not in NO_FLOCK:
                raise
        yield
    finally:
        os.close(handle)


def _staging_folders(parent: str) -> list[str]:
    with os.scandir(parent) as entries:
        return [e.path for e in entries if e.name.startswith(STAGING) and e.is_dir(follow_symlinks=False)]


def _remove_leftovers(parent: str) -> None:
    """Remove the staging folders in ``parent``: under its lock, each is what a killed process left."""
    leftovers = _staging_folders(parent)
    if not leftovers:
        return
    size = sum(
        os.path.getsize(os.path.join(where, name))
        for path in leftovers
        for where, _, files in os.walk(path)
        for name in files
    )
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    print(
        f"removed {len(leftovers)} unfinished folder(s) ({size / 2**20:.0f} MiB) an interrupted build left in {parent}",
        file=sys.stderr,
    )


def _remove_leftovers_if_idle(parent: str) -> None:
    """On the way to a finished entry: remove leftovers when there are some and no process is building (the lock
    is free); a cache this process cannot write is left as it is."""
    import fcntl

    try:
        if not _staging_folders(parent):
            return
        handle = os.open(parent, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _remove_leftovers(parent)
    except OSError:
        pass  # another process is building (its staging folder is not a leftover), or no flock here
    finally:
        os.close(handle)


def _new_staging(parent: str, name: str) -> str:
    """A new empty folder ``<parent>/.tmp_<name[:12]>_<random>``, made with the user's umask (tempfile.mkdtemp
    would make it 0700, which a rename keeps)."""
    while True:
        path = os.path.join(parent, f"{STAGING}{name[:12]}_{secrets.token_hex(4)}")
        try:
            os.mkdir(path, 0o777)
            return path
        except FileExistsError:
            continue


def _umask_modes(staging: str) -> None:
    """Give every file in ``staging`` the mode a new file gets under the user's umask (read off the staging
    folder, which os.mkdir made with it): safetensors writes its file 0600 through a temporary file."""
    folder_mode = os.stat(staging).st_mode & 0o777
    file_mode = folder_mode & 0o666
    for where, folders, files in os.walk(staging):
        for name in folders:
            os.chmod(os.path.join(where, name), folder_mode)
        for name in files:
            path = os.path.join(where, name)
            if not os.path.islink(path) and os.stat(path).st_mode & 0o777 != file_mode:
                os.chmod(path, file_mode)


def where_the_cache_is_set() -> str:
    """How the user chose the cache, for a refusal: the variable's value, or the default and the variable."""
    if os.environ.get(ENV):
        return f"{ENV}={os.environ[ENV]}"
    return f"the default GGUF cache {cache_root()} (set {ENV} to use another folder)"


def _cache_named() -> str:
    if os.environ.get(ENV):
        return f"the GGUF cache {ENV}={os.environ[ENV]}"
    return f"the GGUF cache {cache_root()} (the default; {ENV} unset)"


def _why(error: OSError, name: str) -> str:
    """Why a path in the cache could not be made: a file where a folder is needed, or the system's reason."""
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        path = name
        while path and not os.path.exists(path):
            path = os.path.dirname(path)
        if path and not os.path.isdir(path):
            return f"{path} is {'a file, ' if os.path.isfile(path) else ''}not a folder"  # or a device: /dev/full
    return f"{error.strerror or first_line(error)}: {name}"


@contextlib.contextmanager
def cache_refusals(folder: str, building: str = "building a cached model folder"):
    """Turn a full disk (naming ``folder`` and what was ``building``) and a cache folder that cannot be written
    into one line each (ModelError)."""
    try:
        yield
    except ModelError:
        raise
    except Exception as error:  # noqa: BLE001 - the libraries writing an entry report a full disk in their own types
        if is_full_disk(error):
            raise ModelError(
                f"no space left on the device: {folder} ({building}, {where_the_cache_is_set()}); "
                f"free some space or set {ENV} to a folder on another disk, then rerun the command"
            ) from None
        root = cache_root()
        name = getattr(error, "filename", None)
        if isinstance(error, OSError) and isinstance(name, str) and _inside(name, root):
            raise ModelError(
                f"{_cache_named()} cannot be written ({_why(error, name)}); set {ENV} to a folder you can write"
            ) from None
        raise


def _inside(path: str, root: str) -> bool:
    """True when ``path`` is ``root``, inside it, or one of the folders above it (which makedirs creates)."""
    path, root = os.path.abspath(path), os.path.abspath(root)
    return os.path.commonpath([path, root]) in (path, root)
