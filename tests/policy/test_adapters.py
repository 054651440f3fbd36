"""A LoRA adapter folder as --model: merged into its base once (cached), the merged model computes what PEFT's
unmerged adapter computes and has every parameter of the base; its fingerprint covers the adapter and the base."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from adapter_files import write_adapter
from conftest import BUILTIN_POLICY
from gguf_files import write_gguf

from grpo_mse.errors import ModelError, UsageError
from grpo_mse.policy.loading import load_policy, model_folder
from grpo_mse.policy.model_source import adapter_base, check_model_path, installed_file, model_fingerprint, model_tag

TEXT = "<|im_start|>user\nSolve the arithmetic problem.\n12 + 5 =<|im_end|>\n<|im_start|>assistant\n17"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_MSE_GGUF_CACHE", str(tmp_path / "cache"))


def logits(model, tokenizer):
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokenizer(TEXT).input_ids])).logits


def test_the_merged_adapter_computes_what_peft_computes(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter = write_adapter(tmp_path / "tiny_lora", BUILTIN_POLICY)
    model, tokenizer = load_policy(adapter)
    base, _ = load_policy(BUILTIN_POLICY)
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BUILTIN_POLICY), adapter).eval()
    assert torch.allclose(logits(model, tokenizer), logits(reference, tokenizer), atol=1e-5)
    assert not torch.allclose(logits(model, tokenizer), logits(base, tokenizer), atol=1e-3)  # the adapter acts
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in base.named_parameters()]  # all parameters
    assert model_tag(adapter) == "tiny_lora"


def test_merged_once_then_cached(tmp_path, capsys):
    adapter = write_adapter(tmp_path / "lora", BUILTIN_POLICY)
    folder = model_folder(adapter)
    assert "merging adapter" in capsys.readouterr().err
    assert model_folder(adapter) == folder and "merging" not in capsys.readouterr().err
    assert os.path.basename(folder) == model_fingerprint(adapter).removeprefix("sha256:")


def test_fingerprint_covers_the_adapter_and_its_base(tmp_path):
    first = write_adapter(tmp_path / "a", BUILTIN_POLICY, seed=0)
    other_weights = write_adapter(tmp_path / "b", BUILTIN_POLICY, seed=1)
    base_copy = tmp_path / "tiny_copy"
    shutil.copytree(BUILTIN_POLICY, base_copy)
    (base_copy / "generation_config.json").write_text('{"eos_token_id": 2, "do_sample": true}')
    other_base = write_adapter(tmp_path / "c", str(base_copy), seed=0)
    prints = {model_fingerprint(p) for p in (first, other_weights, other_base)}
    assert len(prints) == 3
    gguf = write_gguf(BUILTIN_POLICY, str(tmp_path / "tiny.gguf"), bos=None, eos=2, pad=0)
    on_gguf = write_adapter(tmp_path / "d", "../tiny.gguf", seed=0)  # a GGUF base, named relative to the adapter
    assert adapter_base(on_gguf) == os.path.join(on_gguf, "../tiny.gguf")
    model, tokenizer = load_policy(on_gguf)
    reference, _ = load_policy(first)  # the same adapter on the folder the GGUF file was written from
    assert torch.allclose(logits(model, tokenizer), logits(reference, tokenizer), atol=1e-5)
    assert model_fingerprint(on_gguf) not in prints and os.path.isfile(gguf)


def test_an_installed_base_is_found_through_its_distribution(tmp_path):
    path = installed_file("pytest", "pytest/__init__.py")
    assert os.path.isfile(path) and path.endswith(os.path.join("pytest", "__init__.py"))
    adapter = write_adapter(tmp_path / "e", "pypi:pytest/pytest/__init__.py")
    assert adapter_base(adapter) == path
    with pytest.raises(ModelError, match="no-such-distribution is not installed"):
        installed_file("no-such-distribution", "x.gguf")


def test_an_adapter_whose_base_is_missing_is_refused_before_loading(tmp_path):
    adapter = write_adapter(tmp_path / "f", str(tmp_path / "missing_base"))
    with pytest.raises(UsageError, match="model folder not found"):
        check_model_path(adapter)


@pytest.mark.slow
def test_trl_launcher_and_verl_dry_run_take_an_adapter_folder(tmp_path):
    """MODEL=<LoRA adapter folder> through grpo_train.sh: TRL trains the merged model one step; VERL's dry run gets
    the merged folder (both cached under the adapter's fingerprint)."""
    import subprocess
    import sys

    pytest.importorskip("trl")
    from conftest import ROOT

    from grpo_mse.training.data import arithmetic_splits, write_splits

    adapter = write_adapter(tmp_path / "tiny_lora", os.path.abspath(BUILTIN_POLICY))
    write_splits(arithmetic_splits(32, 16), str(tmp_path / "data"))
    env = {**os.environ, "GRPO_MSE_GGUF_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    settings = dict(MODEL=adapter, DATA_DIR=str(tmp_path / "data"), GROUP_SIZE="4", BUDGET="32", SEED="1", LR="1e-3")
    settings.update(MAX_RESPONSE_LENGTH="8", TEST_FREQ="1", BASE=str(tmp_path / "base"), WANDB_MODE="offline")
    settings.update(PYTHON_BIN=sys.executable, RUN_TAG="lora", SAVE_MODEL="0")
    launcher = os.path.join(ROOT, "Policy_Optimization", "grpo_train.sh")

    def launch(trainer: str, *extra: str, **more: str):
        return subprocess.run(
            ["bash", launcher, *extra],
            env={**env, **settings, "TRAINER": trainer, **more},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )

    trl = launch("trl", "--max_steps", "1")
    assert trl.returncode == 0, trl.stdout[-2000:] + trl.stderr[-2000:]
    assert "EXPERIMENT_NAME=lora_tiny_lora_K4_seed1" in trl.stdout and "step:1 - " in trl.stdout
    pytest.importorskip("verl")
    verl = launch("verl", DRY_RUN="1")
    assert verl.returncode == 0, verl.stderr[-3000:]
    merged = os.path.join(str(tmp_path / "cache"), "merged", model_fingerprint(adapter).removeprefix("sha256:"))
    assert f"path: {merged}" in verl.stdout  # VERL gets the merged HF folder
