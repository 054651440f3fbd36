"""Bad GGUF inputs and GGUF cache settings end in one line and exit 2, with nothing else changed (issue 45, cases 2,
4 and 8): a GGUF file cut anywhere (an IndexError traceback at 24 bytes or less before), a full disk under the
cache (blamed on "the model weights (safetensors)" before, or a tokenizers traceback), and a GRPO_MSE_GGUF_CACHE
that cannot hold the cache (the variable was not named before).

The cuts, the files the full disk hits and the cache settings are drawn by Hypothesis; the full disk is real: a
symlink to /dev/full in the staging folder (fast), or a small tmpfs mounted in a user namespace (slow, skipped
where ``unshare -rm`` is not allowed), which also gives a read-only cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import pytest
from conftest import BUILTIN_POLICY, ROOT, bounded
from gguf_files import write_gguf
from hypothesis import example, given
from hypothesis import strategies as st
from one_line_checks import boundary, one_error_line, tree

from grpo_mse.policy import model_cache
from grpo_mse.training import model_folder as model_folder_command

ENV = model_cache.ENV
LAUNCHER = os.path.join(ROOT, "Policy_Optimization", "grpo_train.sh")
# What a conversion writes besides model.safetensors (safetensors writes through a temporary file of its own, which
# a symlink cannot redirect: the tmpfs test below fills the disk under it)
WRITTEN = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "gguf_source.json",
)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> str:
    """The shipped tiny policy as a GGUF file (eos 2, pad 0)."""
    return write_gguf(BUILTIN_POLICY, str(tmp_path_factory.mktemp("gguf") / "tiny.gguf"), bos=None, eos=2, pad=0)


def convert(path: str, **environment) -> tuple[int, str]:
    """(exit status, stderr) of ``python -m grpo_mse.training.model_folder path`` in this process; the
    environment's GGUF settings replaced by ``environment`` (a None value unsets one)."""
    names = (ENV, "XDG_CACHE_HOME")
    kept = {name: value for name, value in os.environ.items() if name not in names}
    settings = {name: value for name, value in environment.items() if value is not None}
    with mock.patch.dict(os.environ, {**kept, **settings}, clear=True):
        return boundary(model_folder_command.main, [path])


# ---- case 4: a cut GGUF file --------------------------------------------------------------------------------------


@bounded(40)
@given(kept=st.one_of(st.integers(0, 64), st.integers(65, 1 << 21)))
@example(kept=4)
@example(kept=24)
def test_a_gguf_file_cut_anywhere_is_refused_in_one_line_before_the_cache_is_touched(tiny_gguf, kept):
    """Every cut, from an empty file to one byte short: one line naming the file and what to do; the cache is not
    made (the header is read before it)."""
    with open(tiny_gguf, "rb") as handle:
        data = handle.read()
    with tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "cut.gguf")
        with open(path, "wb") as out:
            out.write(data[: min(kept, len(data) - 1)])
        status, stderr = convert(path, **{ENV: os.path.join(where, "cache")})
        assert status == 2
        one_error_line(stderr, path)
        assert "copy or download it again" in stderr
        assert os.listdir(where) == ["cut.gguf"]


def test_a_gguf_file_cut_at_24_bytes_through_the_launcher_is_one_line(tiny_gguf, tmp_path):
    """The sweep's case: 48 lines of IndexError through grpo_train.sh (the VERL launcher converts the file first)."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(open(tiny_gguf, "rb").read()[:24])
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_text("x")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    env.update(
        DRY_RUN="1",
        TRAINER="verl",
        MODEL=str(cut),
        DATA_DIR=str(data),
        BASE=str(tmp_path / "base"),
        PYTHON_BIN=sys.executable,
        **{ENV: str(tmp_path / "cache")},
    )
    done = subprocess.run(["bash", LAUNCHER], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert f"{cut} is not a readable GGUF file (24 bytes, cut or damaged" in done.stderr
    assert not (tmp_path / "base").exists() and not (tmp_path / "cache").exists()


# ---- case 2: a full disk --------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@bounded(len(WRITTEN))
@given(name=st.sampled_from(WRITTEN))
def test_a_full_disk_while_converting_is_reported_as_a_full_disk_naming_the_cache(tiny_gguf, name):
    """The file ``name`` of the conversion is written to /dev/full (every write fails with ENOSPC, in the real
    writers: json, transformers, tokenizers): one line that says the disk is full and names the cache entry and the
    variable; no entry and no staging folder left."""
    real_staging = model_cache._new_staging

    def staging_on_a_full_disk(parent, entry):
        path = real_staging(parent, entry)
        os.symlink("/dev/full", os.path.join(path, name))
        return path

    with tempfile.TemporaryDirectory() as cache:
        with mock.patch.object(model_cache, "_new_staging", staging_on_a_full_disk):
            status, stderr = convert(tiny_gguf, **{ENV: cache})
        assert status == 2
        one_error_line(stderr, f"no space left on the device: {cache}/")
        assert f"{ENV}={cache}" in stderr and "free some space" in stderr and "safetensors" not in stderr
        assert os.listdir(cache) == []


def test_a_library_full_disk_is_a_full_disk_at_the_boundary():
    """Outside the cache too: safetensors' and tokenizers' own words for ENOSPC are a full disk, not a bad file."""
    from grpo_mse.errors import describe

    for error in (
        Exception("No space left on device (os error 28)"),  # tokenizers
        type("SafetensorError", (Exception,), {"__module__": "safetensors_rust"})(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        ),
    ):
        line = describe(error, "rerun with --resume")
        assert line.startswith("no space left on the device") and line.endswith("rerun with --resume"), line


# ---- case 8: a cache that cannot be written -----------------------------------------------------------------------


@bounded(12)
@given(
    kind=st.sampled_from(["a file", "below a file", "blank", "default below a file", "unwritable folder"]),
    depth=st.integers(1, 3),
    blank=st.text(" \t", min_size=1, max_size=3),
)
def test_a_cache_that_cannot_be_written_is_one_line_naming_the_variable(tiny_gguf, kind, depth, blank):
    if kind == "unwritable folder" and os.geteuid() == 0:
        return  # root writes anywhere: the read-only mount below covers it
    with tempfile.TemporaryDirectory() as where:
        blocker = os.path.join(where, "blocker")
        with open(blocker, "w", encoding="utf-8") as handle:
            handle.write("a file, not a folder\n")
        below = os.path.join(blocker, *["sub"] * depth)
        settings = {
            "a file": {ENV: blocker},
            "below a file": {ENV: below},
            "blank": {ENV: blank},
            "default below a file": {ENV: None, "XDG_CACHE_HOME": below},
            "unwritable folder": {ENV: where},
        }[kind]
        if kind == "unwritable folder":
            os.chmod(where, 0o555)
        before = tree(where)
        try:
            status, stderr = convert(tiny_gguf, **settings)
        finally:
            os.chmod(where, 0o755)
        assert status == 2
        one_error_line(stderr, ENV)
        if kind == "blank":
            assert f"{ENV} is blank" in stderr
        elif kind == "default below a file":
            assert "(the default; GRPO_MSE_GGUF_CACHE unset)" in stderr and f"{blocker} is a file" in stderr
        else:
            assert f"the GGUF cache {ENV}={settings[ENV]} cannot be written" in stderr
            assert f"set {ENV} to a folder you can write" in stderr
        assert tree(where) == before


# ---- a real full disk and a read-only cache (tmpfs in a user namespace) ------------------------------------------


def in_namespace(script: str) -> subprocess.CompletedProcess:
    """``script`` run by sh as root of a new user and mount namespace (its mounts vanish with it)."""
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    point = tmp_path_factory.mktemp("mount")
    if in_namespace(f"mount -t tmpfs -o size=64k tmpfs {point}").returncode != 0:
        pytest.skip("unshare -rm with a tmpfs mount is not allowed here")
    return point


def mounted_run(point, gguf: str, options: str, before: str = "") -> tuple[subprocess.CompletedProcess, list[str]]:
    """The conversion of ``gguf`` into a tmpfs mounted at ``point`` with ``options`` (``before`` runs after the
    mount), and what the cache holds after it."""
    command = f"{sys.executable} -m grpo_mse.training.model_folder {gguf}"
    done = in_namespace(
        f"mount -t tmpfs -o {options} tmpfs {point} && {before or 'true'} && "
        f"{ENV}={point} {command}; status=$?; echo '--- cache'; ls -A {point}; exit $status"
    )
    output, _, listing = done.stdout.partition("--- cache\n")
    done.stdout = output
    return done, listing.split()


@pytest.mark.slow
@bounded(3)
@given(kib=st.integers(4, 1400))
@example(kib=100)  # the sweep's case: the disk fills while safetensors writes the weights
def test_a_real_full_disk_is_one_line_or_a_whole_entry(namespaces, tiny_gguf, kib):
    """A tmpfs of ``kib`` KiB as the cache (the entry takes about 1.1 MiB): exit 0 with the whole entry, or exit 2
    with the full-disk line and nothing in the cache."""
    done, listing = mounted_run(namespaces, tiny_gguf, f"size={kib}k")
    if done.returncode == 0:
        assert [os.path.basename(done.stdout.strip())] == listing
    else:
        assert done.returncode == 2, done.stderr[-3000:]
        one_error_line(done.stderr, f"no space left on the device: {namespaces}/")
        assert listing == []


@pytest.mark.slow
def test_a_read_only_cache_is_named_and_one_holding_the_entry_is_used(namespaces, tiny_gguf, tmp_path):
    done, listing = mounted_run(namespaces, tiny_gguf, "ro")
    assert done.returncode == 2 and listing == []
    one_error_line(done.stderr, f"the GGUF cache {ENV}={namespaces} cannot be written (Read-only file system")
    cache = tmp_path / "cache"
    status, _ = convert(tiny_gguf, **{ENV: str(cache)})
    assert status == 0
    done, listing = mounted_run(
        namespaces, tiny_gguf, "size=4m", f"cp -a {cache}/. {namespaces}/ && mount -o remount,ro {namespaces}"
    )
    assert done.returncode == 0, done.stderr[-3000:]  # a shared read-only cache: reading needs no write
    assert listing == os.listdir(cache)
