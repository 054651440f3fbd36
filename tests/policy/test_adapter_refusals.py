"""Adapter folders in the shapes users bring (issue 45, cases 3 and 13): a folder without its weights file, given
as a relative or an absolute path, is refused in one line that says the weights file is missing (exit 2, no hub
access); an adapter for another architecture names the mismatch; a base path that does not resolve says that a
relative base is read relative to the adapter folder."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
from unittest import mock

import one_line_checks as checks
import pytest
import torch
from adapter_files import write_adapter
from conftest import BUILTIN_POLICY, bounded, tracecov_argv
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.commands import oracle as oracle_command
from grpo_mse.commands import tracecov as tracecov_command
from grpo_mse.errors import ModelError, UsageError
from grpo_mse.policy.loading import load_policy
from grpo_mse.policy.model_source import check_model_path

ROWS = [{"id": i, "prompt": "2 + 3 =", "ground_truth": 5, "V_oracle": 0.5} for i in range(3)]


@pytest.fixture(scope="module")
def adapter_folder(tmp_path_factory):
    """A complete adapter on the tiny policy (named by absolute path)."""
    return write_adapter(tmp_path_factory.mktemp("adapter") / "lora", os.path.abspath(BUILTIN_POLICY))


@contextlib.contextmanager
def no_network():
    """Any connection attempt fails the test (PEFT went to the hub for a folder without weights)."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access")

    with mock.patch.object(socket.socket, "connect", refuse), mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "0"}):
        yield


@contextlib.contextmanager
def inside(folder):
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


@bounded(12)
@given(
    form=st.sampled_from(["relative", "dot", "absolute", "trailing slash"]),
    leftovers=st.sets(st.sampled_from(["README.md", "adapter_model.safetensors.part", "training_args.bin"])),
    command=st.sampled_from(["tracecov", "oracle"]),
)
def test_an_adapter_without_its_weights_file_is_refused_in_one_line(adapter_folder, form, leftovers, command):
    """Before: a relative path gave a 114-line httpx.ConnectError traceback (PEFT went to the hub), an absolute one
    'Repo id must be in the form ...'. Now both say the weights file is missing, exit 2, before any model loads."""
    with tempfile.TemporaryDirectory() as folder, inside(folder), no_network():
        shutil.copytree(adapter_folder, "cut")
        os.remove(os.path.join("cut", "adapter_model.safetensors"))
        for name in leftovers:
            with open(os.path.join("cut", name), "wb") as handle:
                handle.write(b"x")
        name = {
            "relative": "cut",
            "dot": "./cut",
            "absolute": os.path.abspath("cut"),
            "trailing slash": os.path.abspath("cut") + "/",
        }[form]
        table = checks.write_table(folder, ROWS, "jsonl")
        if command == "tracecov":
            code, stderr = checks.boundary(
                tracecov_command.main, tracecov_argv(table, "out", model=name, T=3, M=2, K_list=2)
            )
        else:
            argv = ["--model", name, "--dataset", table, "--n_oracle", "2", "--device", "cpu", "--out_dir", "out"]
            code, stderr = checks.boundary(oracle_command.main, argv)
        assert code == 2
        checks.one_error_line(stderr, f"adapter folder {name} has adapter_config.json but no adapter_model.safetensors")
        assert "weights file is missing" in stderr and not os.path.exists("out")
        with pytest.raises(ModelError, match="weights file is missing"):  # the library path says the same
            load_policy(name)


def test_an_adapter_for_another_architecture_names_the_mismatch(adapter_folder, tmp_path, monkeypatch):
    """Before: 'cannot apply adapter ...: Error(s) in loading state_dict for PeftModel:' and nothing more. Now the
    line names the first weight whose shape differs, both shapes, and what to do."""
    from transformers import AutoConfig, AutoModelForCausalLM

    monkeypatch.setenv("GRPO_MSE_GGUF_CACHE", str(tmp_path / "cache"))
    config = AutoConfig.from_pretrained(BUILTIN_POLICY)
    config.hidden_size *= 2
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "wide")
    for name in os.listdir(BUILTIN_POLICY):
        if name.startswith(("tokenizer", "chat_template", "generation")):
            shutil.copy(os.path.join(BUILTIN_POLICY, name), tmp_path / "wide" / name)
    shutil.copytree(adapter_folder, tmp_path / "other")
    path = tmp_path / "other" / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "base_model_name_or_path": "../wide"}))
    with no_network(), pytest.raises(ModelError) as error:
        load_policy(str(tmp_path / "other"))
    line = str(error.value)
    assert "\n" not in line and "the adapter was made for another architecture" in line
    assert "q_proj.lora_A.default.weight is [4, 64] in the adapter, [4, 128] in the base" in line


def test_a_base_that_is_not_found_says_a_relative_base_is_read_relative_to_the_adapter(adapter_folder, tmp_path):
    shutil.copytree(adapter_folder, tmp_path / "moved")
    path = tmp_path / "moved" / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "base_model_name_or_path": "../tiny_policy"}))
    with inside(tmp_path), pytest.raises(UsageError) as error:
        check_model_path("moved")
    line = str(error.value)
    assert "model folder not found: ../tiny_policy" in line
    assert line.endswith("is read relative to the adapter folder")
