"""GPU readiness checked on CPU (issue 18): what a first GPU run would hit, emulated here.

vLLM's limits refused before any vLLM import, dtype/backend in the oracle settings, Gram block plans by
device, torchrun's process-group arguments, sampled tokens kept in their recomputed nucleus, the VERL
launcher's Ray/vLLM temporary paths, HF_HOME and RESUME_MODE (and a real VERL launch past ray.init).
scripts/gpu_check.sh itself is tested in tests/test_gpu_check.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo_mse import cli, distributed
from grpo_mse.builtin.qwen_shapes import qwen2_5_config
from grpo_mse.config.gradient_evaluation import MIN_TEMPERATURE, OracleConfig, TracecovConfig
from grpo_mse.gradients import statistics
from grpo_mse.policy.logprobs import FAR, token_log_probs
from grpo_mse.policy.sampling import nucleus_mask
from grpo_mse.tables.inputs import oracle_settings, settings_mismatch

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "assets" / "tiny_policy")


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
        with pytest.raises(cli.UsageError, match=r"--backend vllm needs 0.01 <= --temperature <= 2"):
            vllm_config(tmp_path, temperature=temperature)
    if temperature >= MIN_TEMPERATURE:  # the HF path keeps what vLLM would reject (below 0.01 every path refuses)
        assert vllm_config(tmp_path, backend="hf", temperature=temperature).temperature == temperature
    else:
        with pytest.raises(cli.UsageError, match=r"--temperature must be >= 0.01"):
            vllm_config(tmp_path, backend="hf", temperature=temperature)


def test_vllm_device_and_engine_flags(tmp_path):
    with pytest.raises(cli.UsageError, match=r"--device cuda:1 would split.*CUDA_VISIBLE_DEVICES=1"):
        vllm_config(tmp_path, device="cuda:1")
    assert vllm_config(tmp_path, device="cuda:0").device == "cuda:0"
    with pytest.raises(cli.UsageError, match="--vllm_max_model_len"):
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


def test_vllm_sampler_gets_engine_settings(tmp_path, monkeypatch):
    """make_vllm hands enforce_eager and max_model_len to the sampler (the sampler itself needs vLLM)."""
    import grpo_mse.policy.vllm_sampler as vllm_sampler

    seen = {}
    monkeypatch.setattr(vllm_sampler, "VLLMSampler", lambda *args, **kwargs: seen.update(args=args, **kwargs))
    vllm_sampler.make_vllm(vllm_config(tmp_path, vllm_enforce_eager=True, vllm_max_model_len=256), None)
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


# ---------------------------------------------------------------- Gram blocks by device


def test_block_plan_covers_every_coordinate_once():
    sizes = [5, 1, 17, 3, 40, 2]
    for width in (1, 4, 7, 16, 100):
        plan = statistics.block_plan(sizes, width)
        assert all(sum(b - a for _, a, b in spans) == width for spans in plan[:-1])
        assert 0 < sum(b - a for _, a, b in plan[-1]) <= width
        covered = {p: [] for p in range(len(sizes))}
        for spans in plan:
            for p, a, b in spans:
                covered[p].append((a, b))
        for p, size in enumerate(sizes):  # in order, contiguous, no gap or overlap
            ranges = covered[p]
            assert ranges[0][0] == 0 and ranges[-1][1] == size
            assert all(prev[1] == nxt[0] for prev, nxt in zip(ranges, ranges[1:]))
        assert len(plan) == -(-sum(sizes) // width)


def test_block_sizes_by_device_at_qwen_shapes():
    """Qwen2.5-0.5B's parameter sizes (meta tensors: no memory): >= 2^24 coordinates per block on CUDA,
    <= 400 blocks per pass on the CPU for the 5 vectors of a one-group pass (a, s and 3 running sums)."""
    transformers = pytest.importorskip("transformers")
    config = qwen2_5_config("0.5B")
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(config)
    sizes = [p.numel() for p in model.parameters()]
    assert 490e6 < sum(sizes) < 500e6
    cuda = statistics.block_plan(sizes, statistics.block_coordinates(5, "cuda"))
    cpu = statistics.block_plan(sizes, statistics.block_coordinates(5, "cpu"))
    assert statistics.block_coordinates(5, "cuda") >= 1 << 24 and len(cuda) <= 30
    assert len(cpu) <= 400
    old = sum(-(-n // max(4096, (1 << 19) // 5)) for n in sizes)  # the former plan: ~4,900 blocks
    assert old > 10 * len(cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gram64_exact_with_device_blocks(dtype):
    generator = torch.Generator().manual_seed(3)
    shapes = [(7, 5), (3,), (11, 2), (1,)]
    vectors = [[torch.randn(s, generator=generator).to(dtype) for s in shapes] for _ in range(4)]
    flat = torch.stack([torch.cat([t.double().reshape(-1) for t in v]) for v in vectors])
    for block in (None, 1, 6, 13, 1000):
        torch.testing.assert_close(statistics.gram64(vectors, block), flat @ flat.T, rtol=1e-13, atol=1e-13)
    assert statistics.blocks_per_gram(vectors, 13) == -(-flat.shape[1] // 13)


# ---------------------------------------------------------------- torchrun


def test_process_group_gets_long_timeout_and_device_id(monkeypatch):
    calls = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw)))
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.init_from_env("cuda") == (1, 2, "cuda:1")
    backend, kwargs = calls[-1]
    assert backend == "nccl" and kwargs["device_id"] == torch.device("cuda:1")
    assert kwargs["timeout"].total_seconds() == distributed.TIMEOUT_MINUTES * 60 >= 3600
    monkeypatch.setenv("GRPO_DIST_TIMEOUT_MIN", "30")
    assert distributed.init_from_env("cpu") == (1, 2, "cpu")
    assert calls[-1][0] == "gloo" and calls[-1][1]["timeout"].total_seconds() == 1800
    for bad in ("0", "abc", "inf"):
        monkeypatch.setenv("GRPO_DIST_TIMEOUT_MIN", bad)
        with pytest.raises(cli.UsageError, match="GRPO_DIST_TIMEOUT_MIN"):
            distributed.init_from_env("cpu")


# ---------------------------------------------------------------- sampled token just outside the nucleus


def test_sampled_token_outside_recomputed_nucleus_keeps_its_gradient():
    """Probabilities 0.5, 0.3, 0.15, 0.05 with top_p 0.8: the nucleus is {0, 1}. Token 2, sampled when the
    sampler's logits put it inside, must keep a finite log q (renormalised over {0, 1, 2}) and a gradient."""
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    logits = probs.log().to(torch.bfloat16).float().requires_grad_(True)
    assert nucleus_mask(logits.detach(), 1.0, 0.8).tolist() == [True, True, False, False]
    far = torch.tensor(FAR, dtype=torch.float32)
    assert token_log_probs(logits, 1.0, 0.8)[2].detach() == far  # without targets: the constant, no gradient
    logq = token_log_probs(logits, 1.0, 0.8, targets=torch.tensor(2))
    p = torch.softmax(logits.detach().double(), -1)
    assert float(logq[2].detach()) == pytest.approx(float(torch.log(p[2] / p[:3].sum())), rel=1e-6)
    assert float(logq[0].detach()) == pytest.approx(float(torch.log(p[0] / p[:3].sum())), rel=1e-6)
    assert logq[3].detach() == far
    (grad,) = torch.autograd.grad(logq[2], logits)
    expected = -p / p[:3].sum()  # d log q_2 / d logit_j = 1[j=2] - q_j over the kept set
    expected[2] += 1
    expected[3] = 0
    torch.testing.assert_close(grad.double(), expected, rtol=1e-5, atol=1e-7)
    inside = token_log_probs(logits, 1.0, 0.8, targets=torch.tensor(0))  # a target inside: unchanged
    torch.testing.assert_close(inside, token_log_probs(logits, 1.0, 0.8))


def test_all_logprob_paths_keep_the_sampled_token(builtin_policy):
    """The three teacher-forcing paths agree and stay finite for continuations whose tokens lie outside a tiny
    nucleus (top_p = 0.01 keeps only the top token)."""
    from grpo_mse.policy import logprobs

    model, tokenizer = builtin_policy
    prompt = tokenizer("12 + 30 =")["input_ids"]
    continuations = [[5, 9, 11], [7, 3], [2, 2, 2, 4]]
    kwargs = dict(eos_ids=[tokenizer.eos_token_id], pad_id=0, temperature=1.0, top_p=0.01)
    values = [
        fn(model, prompt, continuations, **kwargs)
        for fn in (logprobs.sequence_logprobs, logprobs.packed_prompt_logprobs, logprobs.cached_prompt_logprobs)
    ]
    for value in values:
        assert torch.isfinite(value).all() and (value > -1e3).all()
        torch.testing.assert_close(value, values[0], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- VERL launcher: temporary paths, HF_HOME, resume

LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"
KEEP_OUT = (
    "BASE_DIR",
    "BASE",
    "TMPDIR",
    "HF_HOME",
    "RAY_TMP",
    "RESUME_MODE",
    "CKPT_DIR",
    "LOG_FILE",
    "DRY_RUN",
    "TRAINER",
    "REPO_DIR",
    "CUDA_VISIBLE_DEVICES",
    "WANDB_API_KEY",
)


@pytest.fixture(scope="module")
def long_base(tmp_path_factory):
    """A BASE of 100+ characters with the arithmetic parquet files in it."""
    from grpo_mse.training.data import arithmetic_splits, write_parquet

    base = tmp_path_factory.mktemp("long") / ("a_rather_long_folder_name_" * 4) / "base"
    (base / "data").mkdir(parents=True)
    for split, rows in arithmetic_splits(32, 8).items():
        write_parquet(rows, str(base / "data" / f"{split}.parquet"))
    assert len(str(base)) >= 100
    return base


def launch(base, *overrides, timeout=120, **settings):
    env = {k: v for k, v in os.environ.items() if k not in KEEP_OUT}
    env.update(
        BASE=str(base),
        MODEL=TINY,
        DATA_DIR=str(base / "data"),
        PYTHON_BIN=sys.executable,
        WANDB_MODE="disabled",
        LOGGERS="[console]",
        GPUS="1",
        GROUP_SIZE="8",
        BUDGET="64",
        DRY_RUN="print",
    )
    env.update({k: str(v) for k, v in settings.items()})
    return subprocess.run(
        ["bash", str(LAUNCHER), *overrides], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_temporary_paths_never_under_base(long_base):
    result = launch(long_base)
    assert result.returncode == 0, result.stderr
    ray_tmp = f"/tmp/ray_{os.getuid()}"
    assert f"+ray_kwargs.ray_init._temp_dir={ray_tmp}" in result.stdout
    assert "env_vars.TMPDIR" not in result.stdout and "env_vars.HF_HOME" not in result.stdout
    assert "hf_cache" not in result.stdout and "HF_HOME=default" in result.stdout
    result = launch(long_base, HF_HOME="/data/hf", TMPDIR="/scratch/t")
    assert "env_vars.HF_HOME=\\'/data/hf\\'" in result.stdout and "env_vars.TMPDIR=\\'/scratch/t\\'" in result.stdout
    for settings, message in (
        ({"RAY_TMP": "/tmp/" + "r" * 40}, "RAY_TMP=/tmp/rrrr"),
        ({"RAY_TMP": "relative"}, "RAY_TMP=relative must be an absolute path"),
        ({"TMPDIR": str(long_base)}, "vLLM's IPC sockets"),
    ):
        result = launch(long_base, **settings)
        assert result.returncode == 2 and result.stdout == "", result.stdout
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_resume_mode(long_base, tmp_path):
    result = launch(long_base)
    assert "trainer.resume_mode=disable" in result.stdout and "holds" not in result.stdout
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_3").mkdir(parents=True)
    result = launch(long_base, CKPT_DIR=ckpt)
    assert f"[grpo_train] {ckpt} holds 1 checkpoint(s): RESUME_MODE=disable starts a fresh run" in result.stdout
    result = launch(long_base, CKPT_DIR=ckpt, RESUME_MODE="auto")
    assert "trainer.resume_mode=auto" in result.stdout and "no optimizer state, so Adam restarts" in result.stdout
    result = launch(long_base, CKPT_DIR=ckpt, RESUME_MODE="auto", SAVE_CONTENTS="[model,optimizer,extra]")
    assert "trainer.resume_mode=auto" in result.stdout and "Adam restarts" not in result.stdout
    result = launch(long_base, RESUME_MODE=ckpt / "global_step_3")
    assert f"trainer.resume_mode=resume_path trainer.resume_from_path={ckpt}/global_step_3" in result.stdout
    for bad in ("sometimes", str(ckpt)):
        result = launch(long_base, RESUME_MODE=bad)
        assert result.returncode == 2 and f"RESUME_MODE={bad}: use disable, auto or" in result.stderr


@pytest.mark.slow
def test_dry_run_validates_resume_and_ray_temp_dir(long_base):
    pytest.importorskip("verl")
    result = launch(long_base, DRY_RUN="1", timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resume_mode: disable" in result.stdout and f"_temp_dir: /tmp/ray_{os.getuid()}" in result.stdout


@pytest.mark.slow
def test_real_verl_launch_from_long_base_passes_ray_init(long_base):
    """A real (not dry) VERL launch from a 100+ character BASE: Ray starts (no AF_UNIX path-length error),
    and the launcher stops after ray.init with one line saying why: here the missing transfer_queue module that
    verl 0.9.1's trainer imports first (with it installed: no GPU)."""
    pytest.importorskip("verl")
    pytest.importorskip("ray")
    if subprocess.run(["bash", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("a GPU machine: this emulates the launch on CPU")
    result = launch(
        long_base,
        "trainer.total_training_steps=1",
        "+ray_kwargs.ray_init.include_dashboard=False",
        "+ray_kwargs.ray_init.num_cpus=2",
        DRY_RUN="0",
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert "AF_UNIX path length" not in output and "validate_socket_filename" not in output
    assert "Started a local Ray instance" in output, output[-3000:]
    assert result.returncode != 0
    # verl 0.9.1's trainer imports transfer_queue right after ray.init (requirements-gpu.txt has it; this venv not)
    last = result.stderr.strip().splitlines()[-1]
    assert last in (
        "grpo_train.sh: error: VERL stopped after ray.init: the module 'transfer_queue' is not installed; "
        "pip install -r requirements-gpu.txt",
        "grpo_train.sh: error: VERL stopped after ray.init on a machine without an NVIDIA GPU (no nvidia-smi); "
        "its rollout and actor workers need CUDA",
    ), last


# ---------------------------------------------------------------- one group per pass (large models)


def test_reward_split_sends_each_sequence_through_one_backward(random_lm, monkeypatch):
    """With one group per pass and binary rewards, a and s come from one forward and one backward pass per
    reward value over its own continuations (each sequence once), and the traces equal the reference's."""
    from grpo_mse.gradients import engine
    from grpo_mse.gradients import estimators as est
    from grpo_mse.policy.logprobs import sequence_logprobs

    gen = torch.Generator().manual_seed(4)
    prompt = [3, 5, 7, 9]
    groups = [
        [
            torch.randint(3, 23, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(4)
        ]
        for _ in range(3)
    ]
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    params = list(random_lm.parameters())
    seen = []

    def logprob_fn(continuations):
        seen.append(len(continuations))
        return sequence_logprobs(random_lm, prompt, continuations, eos_ids=[1], pad_id=0)

    grads = []
    real_grad = engine._grad
    monkeypatch.setattr(engine, "_grad", lambda *a, **kw: grads.append(1) or real_grad(*a, **kw))
    fast = engine.prompt_traces(logprob_fn, params, groups, rewards, 0.4, est.ALL, "fast", per_pass=1)
    expected = [
        len({tuple(c) for c, r in zip(group, row.tolist()) if r == value})
        for group, row in zip(groups, rewards)
        for value in sorted(set(row.tolist()))
    ]
    assert seen == expected and len(grads) == 6  # per group: each reward value's own continuations, once
    monkeypatch.setattr(engine, "_grad", real_grad)
    batched = engine.prompt_traces(logprob_fn, params, groups, rewards, 0.4, est.ALL, "fast", per_pass=3)
    reference = engine.prompt_traces(logprob_fn, params, groups, rewards, 0.4, est.ALL, "reference")
    for name in est.ALL:
        assert fast.traces[name] == pytest.approx(reference.traces[name], rel=1e-5, abs=1e-12)
        assert fast.traces[name] == pytest.approx(batched.traces[name], rel=1e-5, abs=1e-12)
    for name in fast.bias2:
        assert fast.bias2[name] == pytest.approx(reference.bias2[name], rel=1e-4, abs=1e-10)


# ---------------------------------------------------------------- HF vs vLLM: do two oracle tables agree?


def synthetic_table(values, n, seed):
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for index, value in enumerate(values):
        correct = int(torch.bernoulli(torch.full((n,), value), generator=generator).sum())
        rows.append(
            {
                "id": index,
                "prompt": f"{index} + 0 =",
                "ground_truth": index,
                "V_oracle": correct / n,
                "n_oracle": n,
                "correct_count": correct,
            }
        )
    return rows


def test_compare_oracle_tables(tmp_path):
    from conftest import load_script

    compare = load_script("scripts/compare_oracle_tables.py")
    values = [0.05, 0.3, 0.5, 0.8, 0.97, 0.0, 1.0, 0.6]
    agreeing = [
        compare.compare(synthetic_table(values, 512, seed), synthetic_table(values, 512, seed + 100))
        for seed in range(20)
    ]
    assert all(report["agree"] for report in agreeing)  # same V: a 0.1% false alarm each
    shifted = [min(1.0, v + 0.08) for v in values]  # vLLM sampling another distribution, e.g. another temperature
    report = compare.compare(synthetic_table(values, 512, 1), synthetic_table(shifted, 512, 2))
    assert not report["agree"] and report["mean_interval"][1] < 0
    one_off = list(values)
    one_off[3] = 0.5  # a single prompt far off: caught by the per-prompt limit
    report = compare.compare(synthetic_table(values, 512, 1), synthetic_table(one_off, 512, 2))
    assert not report["agree"] and report["max_abs_z"] > report["z_limit_per_prompt"]
    # se uses V kept off 0 and 1: two tables with V = 0 on a prompt give z = 0, not a division by zero
    zero = compare.compare([{"id": 0, "V_oracle": 0.0, "n_oracle": 10}], [{"id": 0, "V_oracle": 0.0, "n_oracle": 10}])
    assert zero["agree"] and zero["per_prompt"][0]["z"] == 0.0
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, rows in ((a, synthetic_table(values, 512, 1)), (b, synthetic_table(shifted, 512, 2))):
        path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    result = subprocess.run(
        [sys.executable, "scripts/compare_oracle_tables.py", str(a), str(b), "--out", str(tmp_path / "r.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "DISAGREE" in result.stdout and (tmp_path / "r.json").exists()
    result = subprocess.run(
        [sys.executable, "scripts/compare_oracle_tables.py", str(a), str(tmp_path / "none.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: ")


# ---------------------------------------------------------------- bench_engines: results after every case


def test_bench_engines_writes_after_every_case(builtin_policy, tmp_path, monkeypatch):
    from conftest import load_script

    bench = load_script("benchmarks/bench_engines.py")
    real_case, calls = bench.run_case, []

    def stop_at_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # e.g. gpu_check.sh's time limit
        return real_case(*args, **kwargs)

    monkeypatch.setattr(bench, "run_case", stop_at_second)
    out = tmp_path / "bench.json"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--T", "1", "--M", "3", "--K_list", "2", "--repeats", "1", "--no-float64_check", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert list(saved["cases"]) == ["zero_shot"] and saved["complete"] is False
    case = saved["cases"]["zero_shot"]
    assert case["passes"]["reference"] == 3 and case["passes"]["fast"] >= 1
    assert case["blocks_per_pass"]["fast"] == 1  # the built-in policy fits one float64 block
    assert case["seconds_per_pass"]["fast"] == pytest.approx(case["seconds"]["fast"] / case["passes"]["fast"])
