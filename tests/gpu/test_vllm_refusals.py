"""GPU readiness checked on CPU (issue 18), vLLM: its limits refused before any vLLM import, the vLLM LLM's settings,
dtype and backend in the oracle settings."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gpu_paths import ROOT, TINY

from grpo_mse.config.gradient_evaluation import MIN_TEMPERATURE, OracleConfig, TracecovConfig
from grpo_mse.errors import UsageError
from grpo_mse.tables.inputs import oracle_settings, settings_mismatch

# ---------------------------------------------------------------- vLLM: refused before any work


def vllm_config(tmp_path, **changes):
    flags = dict(
        model=TINY, dataset=str(tmp_path / "d.jsonl"), out_dir=str(tmp_path / "out"), backend="vllm", device="cuda"
    )
    return OracleConfig(**{**flags, **changes})


@pytest.mark.parametrize("temperature,accepted", [(2.5, False), (2.0, True), (0.005, False), (0.01, True), (1.0, True)])
def test_vllm_temperature_range(tmp_path, temperature, accepted):
    """vLLM raises above 2 and silently clamps 0 < T < 0.01 to 0.01: both refused up front, the HF path keeps them."""
    if accepted:
        assert vllm_config(tmp_path, temperature=temperature).temperature == temperature
    else:
        with pytest.raises(UsageError, match=r"--backend vllm needs 0.01 <= --temperature <= 2"):
            vllm_config(tmp_path, temperature=temperature)
    if temperature >= MIN_TEMPERATURE:  # the HF path keeps what vLLM would reject (below 0.01 every path refuses)
        assert vllm_config(tmp_path, backend="hf", temperature=temperature).temperature == temperature
    else:
        with pytest.raises(UsageError, match=r"--temperature must be >= 0.01"):
            vllm_config(tmp_path, backend="hf", temperature=temperature)


def test_vllm_device_and_llm_flags(tmp_path):
    with pytest.raises(UsageError, match=r"--device cuda:1 would split.*CUDA_VISIBLE_DEVICES=1"):
        vllm_config(tmp_path, device="cuda:1")
    assert vllm_config(tmp_path, device="cuda:0").device == "cuda:0"
    with pytest.raises(UsageError, match="--vllm_max_model_len"):
        vllm_config(tmp_path, vllm_max_model_len=0)
    config = TracecovConfig.from_argv(
        [
            "--model",
            TINY,
            "--oracle_table",
            "t.jsonl",
            "--save_json",
            str(tmp_path),
            "--skip_plot",
            "--backend",
            "vllm",
            "--vllm_enforce_eager",
            "--vllm_max_model_len",
            "512",
        ]
    )
    assert config.vllm_enforce_eager is True and config.vllm_max_model_len == 512
    assert config.record()["vllm_enforce_eager"] is True


@pytest.mark.parametrize(
    "script,extra",
    [
        ("Gradient_evaluation/calculate_oracle_v.py", ["--dataset", "missing.jsonl"]),
        (
            "Gradient_evaluation/run_tracecov.py",
            ["--oracle_table", "missing.jsonl", "--save_json", "OUT", "--skip_plot"],
        ),
    ],
)
def test_vllm_checks_run_before_any_import(tmp_path, script, extra):
    """The scripts refuse a vLLM temperature with one line and exit 2, before loading anything (vLLM is not
    installed here: reaching an import would fail differently)."""
    extra = [str(tmp_path / "out") if a == "OUT" else a for a in extra]
    result = subprocess.run(
        [
            sys.executable,
            script,
            "--model",
            TINY,
            "--backend",
            "vllm",
            "--device",
            "cuda",
            "--temperature",
            "3",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --backend vllm needs 0.01 <= --temperature <= 2 (vLLM raises above 2 and silently clamps below "
        "0.01 up to 0.01); got 3: use --backend hf"
    ]
    assert not (tmp_path / "out").exists()


def test_vllm_sampler_gets_llm_settings(tmp_path, monkeypatch):
    """make_vllm hands enforce_eager and max_model_len to the sampler (the sampler itself needs vLLM)."""
    import grpo_mse.policy.vllm_sampler as vllm_sampler

    seen = {}
    monkeypatch.setattr(vllm_sampler, "VLLMSampler", lambda *args, **kwargs: seen.update(args=args, **kwargs))
    vllm_sampler.make_vllm(vllm_config(tmp_path, vllm_enforce_eager=True, vllm_max_model_len=256), None, None)
    assert seen["enforce_eager"] is True and seen["max_model_len"] == 256 and seen["args"][1] == "fp16"


def test_oracle_settings_record_dtype_and_backend(tmp_path):
    """An HF-fp16 oracle table used with vLLM-bf16 sampling is flagged in one line; older tables (no dtype or
    backend recorded) are not flagged for lacking them."""
    table = oracle_settings(vllm_config(tmp_path, backend="hf"), 100)
    assert table["dtype"] == "fp16" and table["backend"] == "hf"
    run = {
        **TracecovConfig(
            model=TINY, oracle_table="t", save_json=str(tmp_path), skip_plot=True, backend="vllm", device="cuda"
        ).record()
    }
    assert run["dtype"] == "bf16"  # the SPEC's defaults stay: oracle fp16, tracecov bf16
    message = settings_mismatch([{"oracle_settings": table}], run)
    assert message == (
        "oracle table sampled with other settings: backend='hf' (run: 'vllm'), dtype='fp16' (run: 'bf16')"
    )
    assert "\n" not in message
    same = {**table, "dtype": "bf16", "backend": "vllm"}
    assert settings_mismatch([{"oracle_settings": same}], run) is None
    older = {k: v for k, v in table.items() if k not in ("dtype", "backend")}
    assert settings_mismatch([{"oracle_settings": older}], run) is None
    assert "temperature" in settings_mismatch([{"oracle_settings": {**older, "temperature": 0.7}}], run)
