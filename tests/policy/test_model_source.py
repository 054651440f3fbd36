"""policy/model_source.py: every kind of --model (hub id, HF folder, GGUF file or the folder holding one, LoRA adapter
folder) resolves to its kind and fingerprints by the documented rule, recomputed here from the files; the module
imports no torch (the commands' --help and flag checks use it)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys

import pytest
from adapter_files import write_adapter
from conftest import BUILTIN_POLICY
from gguf_files import write_gguf

from grpo_mse.policy.model_source import ADAPTER, FOLDER, GGUF, HUB, ModelSource, model_fingerprint, resolve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def caches(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the fingerprint cache starts empty
    monkeypatch.setenv("GRPO_MSE_GGUF_CACHE", str(tmp_path / "gguf_cache"))


def sha256_of(path) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def folder_digest(folder) -> str:
    """The documented folder rule, written independently: sha256 over the files outside hidden names, in the order
    of their relative paths, each as ``path NUL sha256(file) NL``."""
    root = pathlib.Path(folder)
    names = sorted(
        str(file.relative_to(root))
        for file in root.rglob("*")
        if file.is_file() and not any(part.startswith(".") for part in file.relative_to(root).parts)
    )
    lines = b"".join(name.encode() + b"\0" + sha256_of(root / name).encode() + b"\n" for name in names)
    return hashlib.sha256(lines).hexdigest()


def test_the_module_imports_no_torch():
    code = (
        "import sys, grpo_mse.policy.model_source\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'peft', 'gguf'))\n"
        "print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_a_hub_id_and_a_folder(tmp_path):
    hub = resolve("Qwen/Qwen2.5-0.5B-Instruct")
    assert hub == ModelSource("Qwen/Qwen2.5-0.5B-Instruct", HUB)
    assert hub.fingerprint("r1") == "hub:Qwen/Qwen2.5-0.5B-Instruct@r1" and hub.stem() == "Qwen/Qwen2.5-0.5B-Instruct"
    folder = resolve(BUILTIN_POLICY + "/")
    assert folder.kind == FOLDER and folder.stem() == "tiny_policy"
    assert folder.fingerprint() == f"sha256:{folder_digest(BUILTIN_POLICY)}" == model_fingerprint(BUILTIN_POLICY)
    assert resolve(folder) is folder  # resolved once, passed on as is


def test_a_gguf_file_and_the_folder_holding_it(tmp_path):
    os.makedirs(tmp_path / "holder")
    path = write_gguf(BUILTIN_POLICY, str(tmp_path / "holder" / "Tiny-Policy.F32.gguf"), bos=None, eos=2, pad=0)
    for name in (path, str(tmp_path / "holder")):
        source = resolve(name)
        assert (source.kind, source.gguf, source.stem()) == (GGUF, path, "Tiny-Policy.F32")
        assert source.fingerprint() == f"sha256:{sha256_of(path)}"


def test_an_adapter_folder_covers_its_files_and_its_base(tmp_path):
    adapter = write_adapter(tmp_path / "tiny_lora", BUILTIN_POLICY)
    source = resolve(adapter)
    assert source.kind == ADAPTER and source.stem() == "tiny_lora"
    assert source.base().kind == FOLDER and os.path.samefile(source.base().name, BUILTIN_POLICY)
    base = f"sha256:{folder_digest(BUILTIN_POLICY)}"
    expected = hashlib.sha256(f"{folder_digest(adapter)}\n{base}".encode()).hexdigest()
    assert source.fingerprint() == f"sha256:{expected}"
