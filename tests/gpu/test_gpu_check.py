"""scripts/gpu_check.sh for the lent GPU machine (issue 23), and the memory estimates its steps rely on.

- The plan: limits plus kill margins <= 480 s, in priority order; a dry run writes nothing; bad folders refused.
- The CPU emulation (GPU_CHECK_EMULATE=cpu) with vLLM, VERL and Ray hidden (GPU_CHECK_HIDE): every step's state,
  seconds and JSON, the vLLM/VERL steps "skipped: not installed", the others "ok" (slow: a few minutes).
- Memory: the benchmarks' refusal before building a model; the sampler's key/value cache formula against the
  cache it builds; the c1 disk check and the batch chosen to fit.
(compare_tracecov_runs: tests/studies/test_run_agreement.py; each engine's estimate against the measured peak:
tests/studies/test_memory_estimates.py.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from studies.benchmarks import bench_engines as bench_engines_command
from studies.benchmarks import bench_sampling as bench_sampling_command

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
BUDGET = 480
CORE = [
    "versions",
    "oracle_fp32",
    "tracecov_fp32",
    "oracle_bf16",
    "tracecov_bf16",
    "demo_agrees",
    "bench_0_5b",
    "bench_1_5b",
    "advisor",
    "c1_memory",
    "hf_sampling",
]
NEEDS_VLLM = ["oracle_vllm", "vllm_agrees", "tracecov_vllm"]
NEEDS_VERL = ["prepare_data", "verl_train", "collect"]


def run_check(tmp_path, timeout=60, **settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    env.update(GPU_CHECK_PYTHON=sys.executable, **settings)
    return subprocess.run(["bash", str(SCRIPT)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_plan_fits_the_budget_in_priority_order(tmp_path):
    """Dry run: the steps in priority order, each limit + 5 s margin summing to <= 480 s; nothing written."""
    result = run_check(tmp_path, GPU_CHECK_DRY_RUN="1", GPU_CHECK_OUT=str(tmp_path / "c"), GPU_CHECK_HIDE="vllm")
    assert result.returncode == 0, result.stderr
    planned = re.findall(r"^== (\S+) \((\d+) s\): ", result.stdout, flags=re.M)
    assert [name for name, _ in planned] == CORE
    total = sum(int(limit) + 5 for _, limit in planned)
    assert total <= BUDGET and f"planned {total} s of {BUDGET} s" in result.stdout
    for name in NEEDS_VLLM + NEEDS_VERL:
        assert re.search(rf"^== {name}: skipped: not installed \(.*vllm", result.stdout, flags=re.M), name
    assert not (tmp_path / "c").exists()
    selected = run_check(
        tmp_path, GPU_CHECK_DRY_RUN="1", GPU_CHECK_STEPS="versions,c1_memory", GPU_CHECK_OUT=str(tmp_path / "c")
    )
    assert re.findall(r"^== (\S+) \(", selected.stdout, flags=re.M) == ["versions", "c1_memory"]
    assert "== bench_0_5b: skipped: not selected (GPU_CHECK_STEPS)" in selected.stdout


@pytest.mark.parametrize("setting", ["file", "foreign", "emulate", "steps", "scale"])
def test_bad_settings_are_refused_with_one_line(tmp_path, setting):
    out = tmp_path / "out"
    settings = {"GPU_CHECK_OUT": str(out), "GPU_CHECK_EMULATE": "cpu"}
    if setting == "file":
        out.write_text("x")
    elif setting == "foreign":
        out.mkdir()
        (out / "mine.txt").write_text("keep me")
    elif setting == "emulate":
        settings["GPU_CHECK_EMULATE"] = "gpu"
    elif setting == "steps":
        settings["GPU_CHECK_STEPS"] = "versions,bench"
    else:
        settings["GPU_CHECK_LIMIT_SCALE"] = "0"
    result = run_check(tmp_path, **settings)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    expected = {"file": "is a file", "foreign": "not empty", "emulate": "use cpu", "steps": "unknown step bench"}
    assert {**expected, "scale": "GPU_CHECK_LIMIT_SCALE=0"}[setting] in result.stderr
    assert setting in ("file", "foreign") or not out.exists()  # refused before anything is written
    if setting == "foreign":
        assert sorted(os.listdir(out)) == ["mine.txt"]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """One emulated check into an existing empty folder, vLLM, VERL and Ray hidden."""
    out = tmp_path_factory.mktemp("gpu_check")
    result = run_check(
        out, timeout=900, GPU_CHECK_OUT=str(out), GPU_CHECK_EMULATE="cpu", GPU_CHECK_HIDE="vllm verl ray"
    )
    return out, result


@pytest.mark.slow
def test_emulation_runs_every_step(emulated):
    out, result = emulated
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    status = json.loads((out / "status.json").read_text())
    assert status["complete"] is True and status["emulate"] == "cpu" and status["planned_seconds"] <= BUDGET
    steps = {s["step"]: s for s in status["steps"]}
    assert list(steps) == CORE + NEEDS_VLLM + NEEDS_VERL
    for name in CORE:
        assert steps[name]["state"] == "ok" and steps[name]["exit"] == 0, steps[name]
        assert 0 <= steps[name]["seconds"] <= steps[name]["limit"]
        assert (out / steps[name]["output"]).exists() and (out / f"{name}.log").exists()
    for name in NEEDS_VLLM + NEEDS_VERL:
        assert steps[name]["state"].startswith("skipped: not installed (") and "vllm" in steps[name]["state"]
        assert json.loads((out / f"{name}.json").read_text())["state"] == steps[name]["state"]
    versions = json.loads((out / "versions.json").read_text())["packages"]
    assert versions["torch"] == torch.__version__ and versions["vllm"] is None and versions["verl"] is None


@pytest.mark.slow
def test_emulation_results(emulated):
    out, _ = emulated
    for dtype in ("fp32", "bf16"):
        traces = json.loads((out / f"demo_agrees_traces_{dtype}.json").read_text())
        assert traces["verdict"] in ("agree", "cannot tell") and {
            (c["estimator"], c["K"]) for c in traces["cells"]
        } == {(e, k) for e in ("naive", "grpo", "oracleV") for k in (2, 4)}
        assert json.loads((out / f"demo_agrees_oracle_{dtype}.json").read_text())["agree"]
    for name in ("bench_0_5b", "bench_1_5b"):
        case = json.loads((out / f"{name}.json").read_text())["cases"]["zero_shot"]
        assert case["traces_agree"] and case["blocks_per_pass"]["fast"] >= 1 and case["seconds_per_pass"]["fast"] > 0
    plan = json.loads((out / "c1_memory.json").read_text())
    assert plan["estimate"]["vector_bytes"] == pytest.approx(1.54e9 * 4, rel=0.01)  # Qwen2.5-1.5B, fp32 means
    assert plan["chosen_c1_batch"] is None or 2 <= plan["chosen_c1_batch"] <= 16
    sampling = json.loads((out / "hf_sampling.json").read_text())
    assert [b["batch"] for b in sampling["batches"]] in ([2], [2, 4]) and sampling["best_tokens_per_second"] > 0
    assert all(b["tokens"] == 4 * b["batch"] for b in sampling["batches"])  # no EOS: every row its 4 tokens
    assert "recommendation" in json.loads((out / "advisor.json").read_text())


# ---------------------------------------------------------------- memory estimates: the benchmarks' refusal


def test_bench_engines_refuses_before_building_the_model(monkeypatch, capsys):
    """A 1.5B-shaped run on a machine with 1 GB: one line, nothing allocated (the estimate is on meta tensors)."""

    from grpo_mse.errors import UsageError
    from grpo_mse.gradients import memory

    bench = bench_engines_command
    monkeypatch.setattr(memory, "device_available", lambda device: (10**9, "available host memory"))
    monkeypatch.setattr(bench, "load_policy", lambda *a, **k: pytest.fail("loaded a model after a refusal"))
    with pytest.raises(UsageError, match=r"about (\d\d\.?\d*) GB needed, 1 GB available host memory; too little"):
        bench.main(["--qwen_shapes", "1.5B", "--T", "1", "--M", "2", "--K_list", "2"])
    needed = bench.memory_needed(
        list(bench.qwen_shaped_model("meta", "fp32", size="0.5B").parameters()), "cpu", 0, True, groups=2
    )
    # 0.5B in fp32: 1.98 GB of weights; reference 2 x 4 labels x 1.98 GB + one gradient + Welford temporaries
    assert needed["model"] == pytest.approx(1.976e9, rel=1e-3)
    assert needed["reference"] > needed["fast"] and needed["peak"] == needed["model"] + needed["reference"]
    assert 17e9 < needed["peak"] < 24e9  # the documented M = 2 and M = 4 commands fit a 24 GiB machine


def test_sampler_cache_formula_matches_the_cache_it_builds():
    from transformers import Qwen2ForCausalLM

    bench_sampling = bench_sampling_command
    config = bench_sampling.qwen2_5_config("toy")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    batch, tokens = 3, 7
    with torch.no_grad():
        out = model(input_ids=torch.randint(0, 100, (batch, tokens)), use_cache=True)
    cache = out.past_key_values
    held = sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values) if t is not None
    )
    expected = bench_sampling.batch_bytes(config, "fp32", batch, tokens) - batch * config.vocab_size * 24
    assert held == expected


# ---------------------------------------------------------------- c1 at 1.5B: the disk check and the batch that fits


def test_c1_batch_that_fits_is_the_largest(monkeypatch):
    from grpo_mse.gradients.memory import C1_HOST_BYTES, c1_batch_that_fits, c1_memory

    params = [torch.empty(10**9, dtype=torch.bfloat16, device="meta")]  # 4 GB per fp32 mean gradient
    for disk in (0, 3e9, 17e9, 92.6e9, 1e12):
        batch = c1_batch_that_fits(params, 16, int(disk), 10**12, margin=0.0)
        if batch is None:
            assert c1_memory(params, 2, C1_HOST_BYTES)["disk_bytes"] > disk
            continue
        assert c1_memory(params, batch, C1_HOST_BYTES)["disk_bytes"] <= disk
        assert batch == 16 or c1_memory(params, batch + 1, C1_HOST_BYTES)["disk_bytes"] > disk


def test_tracecov_refuses_c1_that_the_disk_cannot_hold(tmp_path, monkeypatch):
    import shutil

    from grpo_mse.config.gradient_evaluation import TracecovConfig
    from grpo_mse.errors import UsageError
    from grpo_mse.gradients import memory
    from grpo_mse.runs import advisor_hook as tracecov

    params = [torch.empty(3 * 10**9, dtype=torch.bfloat16, device="meta")]  # 12 GB per mean gradient: all in files
    config = TracecovConfig(model="m", oracle_table="t", save_json=str(tmp_path / "new" / "run"), skip_plot=True)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(tracecov.shutil, "disk_usage", lambda path: usage._replace(free=50 * 10**9))
    monkeypatch.setattr(memory, "host_available", lambda: 10**12)
    with pytest.raises(UsageError) as error:
        tracecov.check_c1_disk(params, config, 16)
    message = str(error.value)
    assert "\n" not in message and f"under {tmp_path}" in message and "50 GB free" in message
    assert "would write 192 GB" in message and "use --c1_batch 3," in message  # 3 x 12 GB fit in 50 GB x 0.9
    tracecov.check_c1_disk(params, config, 4)  # 48 GB: fits the 50 GB, no error
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------- optional packages: one line when a feature needs one


def test_missing_optional_package_is_one_line(tmp_path):
    """Without `datasets` (hidden as on the GPU machine) a hub dataset id is refused in one line, exit 2, nothing
    written; local files need no `datasets` (the emulation runs without it too)."""
    from grpo_mse.errors import describe

    env = {**os.environ, "GPU_CHECK_HIDE": "datasets", "PYTHONPATH": f"{ROOT / 'scripts' / 'hide_modules'}:{ROOT}"}
    out = tmp_path / "out"
    command = [sys.executable, "Gradient_evaluation/calculate_oracle_v.py", "--model", "assets/tiny_policy"]
    command += ["--dataset", "someone/some_dataset", "--device", "cpu", "--out_dir", str(out)]
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip().splitlines() == [
        "error: this needs the package 'datasets', which is not installed: pip install datasets (only hub datasets "
        "and saved dataset folders need it; .jsonl/.parquet do not)"
    ]
    line = describe(ModuleNotFoundError("No module named 'vllm'", name="vllm.inputs"))
    assert line.startswith("this needs the package 'vllm', which is not installed: pip install -r requirements-gpu")
    assert describe(ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None  # a broken install: traceback


def test_tracecov_refuses_statistics_the_machine_cannot_hold(tmp_path, monkeypatch):
    """run_tracecov checks the engine's memory beside the loaded model before writing anything: Qwen2.5-1.5B
    shapes (meta tensors) with 16 GB available are refused in one line; the built-in policy's size passes."""
    from grpo_mse.config.gradient_evaluation import TracecovConfig
    from grpo_mse.errors import UsageError
    from grpo_mse.gradients import memory
    from grpo_mse.runs import tracecov

    monkeypatch.setattr(memory, "device_available", lambda device: (16 * 10**9, "available host memory"))
    config = TracecovConfig(model="m", oracle_table="t", save_json=str(tmp_path), skip_plot=True, engine="reference")
    big = [torch.empty(1_543_714_304, dtype=torch.bfloat16, device="meta")]
    with pytest.raises(UsageError) as error:
        tracecov.check_memory(big, config.run_sizes(), "cpu")
    message = str(error.value)
    pattern = r"^memory: about \d+\.?\d* GB needed at the least, \d+\.?\d* GB available"
    assert "\n" not in message and re.match(pattern, message)
    for flag in ("--M", "--K_list", "--estimators", "--dtype bf16", "--no_advisor"):  # this command's own flags
        assert flag in message
    assert "repeats" not in message
    plan = tracecov.check_memory([torch.empty(270_000, device="meta")], config.run_sizes(), "cpu")
    assert plan.line().startswith("memory: about ") and plan.kept_rows == 0
