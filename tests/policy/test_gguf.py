"""GGUF model files as --model: converted once to an HF folder, special tokens from the file's metadata, the
file's own sha256 as the model's fingerprint, outputs named after the file. The GGUF files are written by the
tests (gguf_files.py) from the shipped tiny policy (qwen2) and a random Llama (llama.cpp's rotary permutation)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
import torch
from conftest import BUILTIN_POLICY
from gguf_files import tiny_llama_folder, write_gguf

from grpo_mse.errors import ModelError
from grpo_mse.policy import gguf_convert
from grpo_mse.policy.gguf_convert import read_gguf_info
from grpo_mse.policy.loading import eos_token_ids, load_policy, model_folder
from grpo_mse.policy.model_source import gguf_file_of, model_basename_tag, model_fingerprint, model_stem, model_tag

TEXT = "<|im_start|>user\nSolve the arithmetic problem.\n12 + 5 =<|im_end|>\n<|im_start|>assistant\n17"


@pytest.fixture(autouse=True)
def gguf_cache(tmp_path, monkeypatch):
    """Each test converts into its own cache folder (never the user's)."""
    monkeypatch.setenv("GRPO_MSE_GGUF_CACHE", str(tmp_path / "gguf_cache"))
    return tmp_path / "gguf_cache"


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    """(qwen2 file of the tiny policy with eos 2 / pad 0 and no bos, llama file with bos 1 / eos 2 / pad 2,
    the llama's source folder)."""
    root = tmp_path_factory.mktemp("gguf")
    qwen = write_gguf(BUILTIN_POLICY, str(root / "tiny-policy.gguf"), bos=None, eos=2, pad=0)
    llama_dir = tiny_llama_folder(BUILTIN_POLICY, str(root / "llama_hf"))
    os.makedirs(root / "llama_only")
    llama = write_gguf(llama_dir, str(root / "llama_only" / "Tiny-Llama.F32.gguf"), bos=1, eos=2, pad=2)
    return qwen, llama, llama_dir


def logits(model, tokenizer, text=TEXT):
    ids = torch.tensor([tokenizer(text).input_ids])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_qwen2_file_loads_as_the_model_it_was_written_from(gguf_files):
    qwen, _, _ = gguf_files
    model, tokenizer = load_policy(qwen)
    reference, reference_tokenizer = load_policy(BUILTIN_POLICY)
    assert tokenizer(TEXT).input_ids == reference_tokenizer(TEXT).input_ids
    assert torch.equal(logits(model, tokenizer), logits(reference, reference_tokenizer))
    assert (tokenizer.eos_token, tokenizer.pad_token_id, tokenizer.bos_token) == ("<|im_end|>", 0, None)
    assert eos_token_ids(model, tokenizer) == [2]


def test_llama_file_undoes_the_rotary_permutation_and_takes_its_special_tokens(gguf_files):
    """SmolLM2's case: transformers alone gives eos <|im_start|> (id 1) and no pad; the file says 2 and 2."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, llama, llama_dir = gguf_files
    raw = AutoTokenizer.from_pretrained(os.path.dirname(llama), gguf_file=os.path.basename(llama))
    assert (raw.eos_token_id, raw.pad_token_id) == (1, None)  # the bug the conversion fixes
    model, tokenizer = load_policy(llama)
    source = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()
    assert torch.equal(logits(model, tokenizer), logits(source, tokenizer))
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert (model.config.eos_token_id, model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (
        2,
        2,
        2,
    )
    assert eos_token_ids(model, tokenizer) == [2]


def test_converted_once_then_read_from_the_cache(gguf_files, gguf_cache, capsys):
    qwen, _, _ = gguf_files
    folder = model_folder(qwen)
    assert os.path.dirname(folder) == str(gguf_cache)
    assert os.path.basename(folder) == hashlib.sha256(open(qwen, "rb").read()).hexdigest()
    assert "converting" in capsys.readouterr().err
    stamp = os.stat(os.path.join(folder, "model.safetensors")).st_mtime_ns
    assert model_folder(qwen) == folder
    assert "converting" not in capsys.readouterr().err
    assert os.stat(os.path.join(folder, "model.safetensors")).st_mtime_ns == stamp
    assert [n for n in os.listdir(gguf_cache) if n.startswith(".tmp")] == []  # no staging folder left


def test_a_cached_file_is_loaded_without_parsing_its_metadata_and_a_cut_copy_is_still_refused(
    gguf_files, gguf_cache, tmp_path, monkeypatch
):
    """Reading a GGUF file's metadata builds its whole vocabulary (5-9 s on Qwen2.5's 150k tokens), so it is read
    only for a conversion; a cut file has another sha256, names no conversion and is refused by its metadata."""
    qwen, _, _ = gguf_files
    folder = model_folder(qwen)
    reads = []
    monkeypatch.setattr(gguf_convert, "read_gguf_info", lambda path: reads.append(path) or read_gguf_info(path))
    assert model_folder(qwen) == folder and reads == []
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(open(qwen, "rb").read()[:4096])
    before = sorted(os.listdir(gguf_cache))
    with pytest.raises(ModelError):
        model_folder(str(cut))
    assert reads == [str(cut)] and sorted(os.listdir(gguf_cache)) == before


def test_an_interrupted_conversion_is_redone(gguf_files, gguf_cache):
    qwen, _, _ = gguf_files
    folder = model_folder(qwen)
    os.remove(os.path.join(folder, gguf_convert.SOURCE_RECORD))  # as if killed before the record was written
    os.remove(os.path.join(folder, "model.safetensors"))
    assert model_folder(qwen) == folder
    assert os.path.isfile(os.path.join(folder, "model.safetensors"))


def test_a_conversion_of_another_converter_version_is_redone(gguf_files):
    qwen, _, _ = gguf_files
    folder = model_folder(qwen)
    record = os.path.join(folder, gguf_convert.SOURCE_RECORD)
    with open(record, encoding="utf-8") as handle:
        source = json.load(handle)
    assert source["converter_version"] == gguf_convert.CONVERTER_VERSION
    with open(record, "w", encoding="utf-8") as handle:
        json.dump({**source, "converter_version": 1}, handle)
    assert model_folder(qwen) == folder
    assert gguf_convert.is_current(folder)


def test_pad_falls_back_to_eos_when_the_file_names_none(tmp_path):
    path = write_gguf(BUILTIN_POLICY, str(tmp_path / "nopad.gguf"), bos=None, eos=2, pad=None)
    assert read_gguf_info(path).tokens.pad is None
    model, tokenizer = load_policy(path)
    assert tokenizer.pad_token_id == 2 == model.generation_config.pad_token_id


def test_fingerprint_is_the_file_sha256_also_through_its_folder(gguf_files):
    _, llama, _ = gguf_files
    expected = "sha256:" + hashlib.sha256(open(llama, "rb").read()).hexdigest()
    assert model_fingerprint(llama) == expected
    assert model_fingerprint(os.path.dirname(llama)) == expected
    assert gguf_file_of(os.path.dirname(llama)) == llama


def test_outputs_are_named_after_the_file(gguf_files):
    _, llama, _ = gguf_files
    for name in (llama, os.path.dirname(llama), os.path.dirname(llama) + "/"):
        assert model_stem(name) == "Tiny-Llama.F32"
        assert model_tag(name) == model_basename_tag(name) == "Tiny_Llama.F32"
    assert model_tag("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen_Qwen2.5_0.5B_Instruct"  # hub ids as before
    assert model_basename_tag("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen2.5_0.5B_Instruct"
    assert model_tag(BUILTIN_POLICY) == "tiny_policy"


def test_a_folder_of_two_gguf_files_and_a_fake_gguf_file_are_refused(gguf_files, tmp_path):
    qwen, llama, _ = gguf_files
    shutil.copy(qwen, tmp_path / "a.gguf")
    shutil.copy(llama, tmp_path / "b.gguf")
    with pytest.raises(ModelError, match="holds 2 GGUF files"):
        gguf_file_of(str(tmp_path))
    fake = tmp_path / "fake" / "model.gguf"
    os.makedirs(fake.parent)
    fake.write_bytes(b"not a gguf file")
    for name in (str(fake), str(fake.parent)):
        with pytest.raises(ModelError, match="is not a GGUF file"):
            gguf_file_of(name)
    assert gguf_file_of(BUILTIN_POLICY) is None  # an HF folder is not a GGUF folder
