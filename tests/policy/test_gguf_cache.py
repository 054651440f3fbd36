"""The GGUF cache's own states (issue 45, cases 5, 6 and 9): staging folders a killed conversion left, a damaged
finished entry, two processes converting one file at once, and the modes of what the cache writes.

The cache states (leftovers, which file of an entry is damaged and how, the umask) are drawn by Hypothesis and
checked against a pristine conversion of the same tiny GGUF file: a conversion is deterministic, so a rebuilt
entry equals it byte for byte."""

from __future__ import annotations

import fcntl
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from unittest import mock

import pytest
from conftest import BUILTIN_POLICY, ROOT, bounded
from gguf_files import write_gguf
from hypothesis import given
from hypothesis import strategies as st
from one_line_checks import boundary, one_error_line

from grpo_mse.policy import model_cache
from grpo_mse.training import model_folder as model_folder_command

ENV = model_cache.ENV
# The files of a converted tiny GGUF file (checked against the pristine entry below)
ENTRY_FILES = (
    "cached_files.json",
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "gguf_source.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> str:
    return write_gguf(BUILTIN_POLICY, str(tmp_path_factory.mktemp("gguf") / "tiny.gguf"), bos=None, eos=2, pad=0)


@pytest.fixture(scope="module")
def pristine(tiny_gguf, tmp_path_factory) -> str:
    """The tiny GGUF file's entry, converted once into a cache of its own."""
    cache = str(tmp_path_factory.mktemp("pristine"))
    status, stderr = convert(tiny_gguf, cache)
    assert status == 0, stderr
    (name,) = os.listdir(cache)
    assert sorted(os.listdir(os.path.join(cache, name))) == list(ENTRY_FILES)
    return os.path.join(cache, name)


def convert(path: str, cache: str) -> tuple[int, str]:
    """(exit status, stderr) of ``python -m grpo_mse.training.model_folder path`` in this process, cache ``cache``."""
    with mock.patch.dict(os.environ, {ENV: cache}):
        return boundary(model_folder_command.main, [path])


def contents(folder: str) -> dict:
    found = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as handle:
            found[name] = handle.read()
    return found


def staging_folders(cache: str) -> list[str]:
    return sorted(name for name in os.listdir(cache) if name.startswith(".tmp_"))


# ---- case 5: what a killed conversion leaves ---------------------------------------------------------------------

SUFFIX = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=8, max_size=8)
LEFTOVER = st.tuples(
    st.sampled_from(["this entry", "another entry"]),  # .tmp_<first 12 of the entry's name>_..., as every version
    SUFFIX,
    st.lists(st.binary(max_size=4096), max_size=3),  # the files written before the kill
)


@bounded(15)
@given(
    leftovers=st.lists(LEFTOVER, max_size=3, unique_by=lambda item: (item[0], item[1])),
    entry=st.sampled_from(["absent", "finished", "unfinished"]),
    building=st.booleans(),
)
def test_staging_folders_a_killed_conversion_left_are_removed(tiny_gguf, pristine, leftovers, entry, building):
    """The next process that converts, or that finds the entry finished while no build runs, removes every
    staging folder (saying how much it removed) and gets the whole entry; while another process builds (holds
    the cache's lock) its staging folder is not a leftover and stays."""
    building = building and entry == "finished"  # otherwise this process would wait for the build
    digest = os.path.basename(pristine)
    with tempfile.TemporaryDirectory() as cache:
        if entry != "absent":
            shutil.copytree(pristine, os.path.join(cache, digest))
        if entry == "unfinished":  # a folder without its record: redone, as an interrupted conversion
            os.remove(os.path.join(cache, digest, "gguf_source.json"))
        for which, suffix, files in leftovers:
            folder = os.path.join(cache, f".tmp_{(digest if which == 'this entry' else 'f' * 64)[:12]}_{suffix}")
            os.mkdir(folder)
            for i, data in enumerate(files):
                with open(os.path.join(folder, f"part{i}"), "wb") as handle:
                    handle.write(data)
        before = staging_folders(cache)
        lock = os.open(cache, os.O_RDONLY)
        try:
            if building:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            status, stderr = convert(tiny_gguf, cache)
        finally:
            os.close(lock)
        assert status == 0, stderr
        assert contents(os.path.join(cache, digest)) == contents(pristine)
        if building:
            assert staging_folders(cache) == before
        else:
            assert staging_folders(cache) == []
            assert (f"removed {len(before)} unfinished folder(s)" in stderr) == bool(before), stderr


@pytest.mark.slow
def test_a_conversion_killed_with_sigkill_leaves_nothing_after_the_next_run(tiny_gguf, pristine, tmp_path):
    """The sweep's case: kill -9 during a conversion left a hidden .tmp_* folder (517 MB for SmolLM2) for good."""
    cache = str(tmp_path / "cache")
    child = subprocess.Popen(
        [sys.executable, "-m", "grpo_mse.training.model_folder", tiny_gguf],
        env={**os.environ, ENV: cache, "PYTHONPATH": ROOT},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not (os.path.isdir(cache) and staging_folders(cache)) and child.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the conversion finished before it could be killed"
    assert len(staging_folders(cache)) == 1 and os.listdir(cache) == staging_folders(cache)
    status, stderr = convert(tiny_gguf, cache)
    assert status == 0 and "removed 1 unfinished folder(s)" in stderr, stderr
    assert os.listdir(cache) == [os.path.basename(pristine)]
    assert contents(os.path.join(cache, os.path.basename(pristine))) == contents(pristine)


# ---- case 6: a damaged entry ----------------------------------------------------------------------------------


@bounded(20)
@given(
    name=st.sampled_from(ENTRY_FILES),
    how=st.sampled_from(["cut", "removed", "grown"]),
    at=st.floats(0, 1, exclude_max=True),
    tail=st.binary(min_size=1, max_size=64),
)
def test_a_damaged_entry_is_named_and_converted_again(tiny_gguf, pristine, name, how, at, tail):
    """Any file of the entry cut, removed or grown: the entry is converted again (the note names the cache folder
    unless the damage is to the record, which makes the entry an unfinished one); the result equals a fresh
    conversion. (The sweep's case, model.safetensors cut, was reused as it was and blamed on the GGUF file.)"""
    if name == model_cache.MANIFEST and how == "removed":
        return  # an entry without the size record is one made before it: checked by its parts only (next test)
    with tempfile.TemporaryDirectory() as cache:
        folder = shutil.copytree(pristine, os.path.join(cache, os.path.basename(pristine)))
        path = os.path.join(folder, name)
        if how == "removed":
            os.remove(path)
        else:
            data = open(path, "rb").read()
            with open(path, "wb") as handle:
                handle.write(data[: int(at * len(data))] if how == "cut" else data + tail)
        status, stderr = convert(tiny_gguf, cache)
        assert status == 0, stderr
        assert contents(folder) == contents(pristine)
        if name != "gguf_source.json":
            assert f"the cached folder {folder} is damaged ({name}" in stderr, stderr
        assert os.listdir(cache) == [os.path.basename(folder)]


def test_an_entry_made_before_the_size_record_is_checked_by_its_parts(tiny_gguf, pristine, tmp_path):
    """Entries converted before cached_files.json (the user's cache today) are used as they are when whole, and
    converted again when their weights are cut; a damage no check sees fails at loading, naming the cache folder."""
    from grpo_mse.policy.loading import load_policy

    cache = str(tmp_path / "cache")
    folder = shutil.copytree(pristine, os.path.join(cache, os.path.basename(pristine)))
    os.remove(os.path.join(folder, model_cache.MANIFEST))
    stamp = os.stat(os.path.join(folder, "model.safetensors")).st_mtime_ns
    assert convert(tiny_gguf, cache)[0] == 0
    assert os.stat(os.path.join(folder, "model.safetensors")).st_mtime_ns == stamp  # used as it is
    weights = os.path.join(folder, "model.safetensors")
    os.truncate(weights, os.path.getsize(weights) - 1)
    status, stderr = convert(tiny_gguf, cache)
    assert status == 0 and f"the cached folder {folder} is damaged (model.safetensors has" in stderr, stderr
    assert contents(folder) == contents(pristine)
    os.remove(os.path.join(folder, model_cache.MANIFEST))
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        handle.write("{}")  # valid JSON, no model
    with mock.patch.dict(os.environ, {ENV: cache}):
        status, stderr = boundary(lambda argv: load_policy(*argv), [tiny_gguf])
    assert status == 2
    one_error_line(stderr, f"cannot load model {tiny_gguf!r} from its cached folder {folder}: ")
    assert "remove that folder to build it again" in stderr


# ---- case 9: two processes at once, and the modes of the entries ----------------------------------------------


def stderr_lines(process) -> queue.Queue:
    lines = queue.Queue()

    def read():
        for line in iter(process.stderr.readline, ""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_a_second_process_waits_for_the_first_and_keeps_its_entry(tiny_gguf, pristine, tmp_path):
    """While a build holds the cache (here: this test), a second process says it waits; the entry the first one
    finishes is the one it uses and keeps (the old code replaced it with its own conversion)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    lock = os.open(cache, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    second = subprocess.Popen(
        [sys.executable, "-m", "grpo_mse.training.model_folder", tiny_gguf],
        env={**os.environ, ENV: str(cache), "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines, seen = stderr_lines(second), []
        while not any("waiting for another process building in" in line for line in seen):
            line = lines.get(timeout=120)
            assert line is not None, "".join(seen)
            seen.append(line)
        staging = cache / ".tmp_first_builder"  # the first process's build, finished while the second waits
        shutil.copytree(pristine, staging)
        os.rename(staging, cache / os.path.basename(pristine))
        first = os.stat(cache / os.path.basename(pristine)).st_ino
    finally:
        os.close(lock)
    stdout = second.stdout.read()
    second.wait(timeout=120)
    seen += list(iter(lambda: lines.get(timeout=60), None))
    assert second.returncode == 0, "".join(seen)
    assert stdout.strip() == str(cache / os.path.basename(pristine))
    assert not any("converting" in line for line in seen)
    assert os.stat(cache / os.path.basename(pristine)).st_ino == first
    assert os.listdir(cache) == [os.path.basename(pristine)]


@pytest.mark.slow
def test_two_processes_started_together_convert_once(tiny_gguf, pristine, tmp_path):
    cache = str(tmp_path / "cache")
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "grpo_mse.training.model_folder", tiny_gguf],
            env={**os.environ, ENV: cache, "PYTHONPATH": ROOT},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    done = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], done
    assert {stdout.strip() for stdout, _ in done} == {os.path.join(cache, os.path.basename(pristine))}
    assert sum(stderr.count("converting ") for _, stderr in done) == 1, done
    assert os.listdir(cache) == [os.path.basename(pristine)]
    assert contents(os.path.join(cache, os.path.basename(pristine))) == contents(pristine)


@bounded(4)
@given(umask=st.sampled_from([0o002, 0o022, 0o027, 0o077]))
def test_entries_take_the_users_umask(tiny_gguf, umask):
    """Folders 0777 and files 0666 less the umask, as anything else the user makes: under the usual 022 other
    users can read a shared cache (mkdtemp made every entry 0700 and safetensors its file 0600)."""
    with tempfile.TemporaryDirectory() as where:
        cache = os.path.join(where, "cache")
        old = os.umask(umask)
        try:
            status, stderr = convert(tiny_gguf, cache)
        finally:
            os.umask(old)
        assert status == 0, stderr
        modes = {}
        for folder, _, files in os.walk(cache):
            modes[folder] = os.stat(folder).st_mode & 0o777
            for name in files:
                modes[os.path.join(folder, name)] = os.stat(os.path.join(folder, name)).st_mode & 0o777
        for path, mode in modes.items():
            assert mode == (0o777 if os.path.isdir(path) else 0o666) & ~umask, (path, oct(mode))
