"""The run's memory plan (grpo_mse.gradients.memory_plan.plan_run): essentials decide whether a run fits; speed-ups (a
prompt's rows kept together, c1's mean gradients in memory) take only what is left and never cause a refusal; the
estimate printed by run_tracecov.py is within 25% of the peak the process measures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import estimate_and_peak
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grpo_mse.gradients import allocator, memory_plan
from grpo_mse.gradients.memory import C1_HOST_BYTES

ROOT = Path(__file__).resolve().parents[2]
GB = 10**9
DEMO_TABLE = ROOT / "results" / "demo" / "oracle_v_n256_tiny_policy_20261201_225502.jsonl"  # the committed demo's


def qwen_shape(m: int = 2, c1_vectors: int = 2, **changes) -> memory_plan.RunShape:
    """Qwen2.5-0.5B (494M parameters, fp32): 1.98 GB a row, the 545 MB tied embedding as its largest tensor."""
    values = dict(
        row=1_976_131_072,
        vector=1_976_131_072,
        largest=544_538_624,
        labels=4,
        rows_per_pass=2,
        rows_per_prompt=2 * m,
        activations=300_000_000,
        c1_vectors=c1_vectors,
        c1_reads=1,
    )
    return memory_plan.RunShape(**{**values, **changes})


shapes = st.builds(
    memory_plan.RunShape,
    row=st.integers(1, 4 * GB),
    vector=st.integers(1, 4 * GB),
    largest=st.integers(0, GB),
    labels=st.integers(1, 8),
    rows_per_pass=st.sampled_from([2, 4, 8]),
    rows_per_prompt=st.integers(2, 32).map(lambda n: 2 * n),
    activations=st.integers(0, 4 * GB),
    c1_vectors=st.integers(0, 48),
    c1_reads=st.integers(0, 3),
    rows_likely=st.one_of(st.none(), st.integers(0, 64)),
    engine=st.sampled_from(["fast", "reference", "sketched"]),
    large=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(shapes, st.integers(0, GB), st.integers(0, 200 * GB))
def test_speed_ups_never_make_a_run_not_fit(shape, held, available):
    assume(shape.largest <= shape.row)
    plan = memory_plan.plan_run(shape, held, available)
    least = min(shape.statistics(0), shape.statistics(shape.rows_per_prompt) if shape.large else shape.statistics(0))
    assert plan.essential == least
    assert plan.fits() == (least <= available)  # only the essentials decide
    assert 0 <= plan.kept_rows <= shape.rows_per_prompt  # never more rows than a prompt produces
    assert plan.kept_rows == 0 or (shape.large and shape.engine == "fast")
    assert 0 <= plan.c1_in_memory <= shape.c1_vectors
    assert plan.c1_bytes == plan.c1_in_memory * shape.vector <= max(C1_HOST_BYTES, 0)
    if plan.fits():  # what the plan adds beyond the essentials stays within its share of the memory
        assert plan.statistics == least or plan.statistics <= memory_plan.PLAN_MARGIN * available
        assert plan.needed - held <= max(memory_plan.PLAN_MARGIN * available, least) + shape.vector
    assert plan.needed <= plan.most  # the likely peak never above the most a prompt can need


def test_likely_rows_match_an_enumeration_of_every_group_s_outcome():
    """The fullest prompt's rows, computed by listing every way the groups' rewards can differ or not (each group of K
    with 0/1 rewards of mean V: mixed with probability 1 - V^K - (1 - V)^K, then two rows, else one)."""
    import itertools
    import math

    values, k_list, m = [0.0625, 0.3, 0.9], [4, 8], 2
    pairs = [1 - v**k - (1 - v) ** k for v in values for k in k_list]
    law = {}  # P(fullest prompt gives r rows)
    for outcome in itertools.product([0, 1], repeat=m * len(pairs)):
        chance = math.prod(pairs[j // m] if mixed else 1 - pairs[j // m] for j, mixed in enumerate(outcome))
        fullest = max(m + sum(outcome[i * m : (i + 1) * m]) for i in range(len(pairs)))
        law[fullest] = law.get(fullest, 0.0) + chance
    for quantile in (0.05, 0.5, 0.9, 0.999):
        cumulative, expected = 0.0, None
        for rows in sorted(law):
            cumulative += law[rows]
            if cumulative >= quantile:
                expected = rows
                break
        assert memory_plan.likely_rows(values, k_list, m, quantile) == expected, quantile
    assert memory_plan.likely_rows([0.5] * 48, [4, 8, 16], 8) == 16  # the paper's shape at V = 1/2: every row
    assert memory_plan.likely_rows([0.0, 1.0], [4, 8], 4) == 4  # rewards all equal: one row a group


def test_a_run_whose_prompts_all_have_v_0_likely_makes_no_pass():
    """Issue 54, item 4: a prompt with V = 0 has rewards all 0, so every estimator's weight is 0 and the fast engine
    makes no pass (engine.group_plan); the likely peak was planned with a pass's rows and activations (SmolLM2 on an
    all-V = 0 table, T 1 M 2 K 2: 2.5 GB printed, 1.0 measured). The most stays every row; so does the reference
    engine, which makes every pass."""
    assert memory_plan.likely_rows([0.0, 0.0], [2, 4], 2) == 0
    assert (
        memory_plan.likely_rows([0.0, 0.5], [4], 2) == memory_plan.likely_rows([0.5], [4], 2) > 0
    )  # the fullest prompt's
    shape = qwen_shape(m=2, rows_likely=0)
    plan = memory_plan.plan_run(shape, held=2 * GB, available=20 * GB)
    assert shape.likely().backward() == 0 and plan.likely_statistics == shape.formed() == 0
    assert plan.needed == 2 * GB + plan.c1_bytes  # a c1 batch's mean gradients are still counted
    assert plan.most == memory_plan.plan_run(qwen_shape(m=2), held=2 * GB, available=20 * GB).most
    reference = qwen_shape(m=2, rows_likely=0, engine="reference")
    assert reference.likely() == reference


def test_activations_are_those_of_the_fullest_pass_not_the_most_groups_times_the_longest():
    """Issue 54, item 4: a pass takes up to 128 sequences, so its groups shrink as K grows; the activations were
    planned for the least K's groups (16 at K 4) times the largest K's continuations (32): 512 sequences where a pass
    holds 128 (the tiny policy at T 16, M 16, K 4 8 16 32: 1.06 GB printed against a 0.55 GB peak)."""
    import torch

    from grpo_mse.config.gradient_evaluation import TracecovConfig

    class Sizes:
        num_hidden_layers, hidden_size, intermediate_size, vocab_size = 4, 64, 256, 358

    argv = ["--oracle_table", "t.jsonl", "--skip_plot", "--save_json", "out", "--device", "cpu", "--T", "16"]
    config = TracecovConfig.from_argv([*argv, "--M", "16", "--K_list", "4", "8", "16", "32", "--max_new_tokens", "32"])
    params = [torch.empty(270_000, device="meta")]
    shape = memory_plan.run_shape(params, config.run_sizes(), Sizes(), prompt_tokens=20)
    fullest = max(
        memory_plan.activation_bytes(Sizes(), g * 20, g * k * 32, 4) for k, g in ((4, 16), (8, 16), (16, 8), (32, 4))
    )
    old = memory_plan.activation_bytes(Sizes(), 16 * 20, 16 * 32 * 32, 4)  # 512 sequences
    assert shape.activations == fullest == memory_plan.activation_bytes(Sizes(), 16 * 20, 128 * 32, 4) < old / 3
    assert shape.rows_per_pass == 2 * 16  # the rows of a pass are the least K's: 16 groups


def test_the_likely_peak_is_printed_beside_the_most_a_prompt_can_need():
    shape = qwen_shape(m=2, rows_likely=3)
    plan = memory_plan.plan_run(shape, held=2 * GB, available=20 * GB)
    assert plan.kept_rows == 4  # room is kept for a prompt's every row
    assert plan.needed == plan.most - shape.row  # likely: one row fewer
    assert f"at most {plan.most / 1e9:.3g} if every group's rewards differ" in plan.line()
    full = memory_plan.plan_run(qwen_shape(m=2), held=2 * GB, available=20 * GB)
    assert full.needed == full.most and "at most" not in full.line()


def test_the_sketched_engine_plans_one_row_its_signs_and_sketch_sized_statistics(tmp_path):
    """--engine sketched: one group a pass and no model-sized row (each parameter's gradient sketched as it is made:
    the largest one twice), n bytes of signs, every label's float64 Welford pair and the transients of d
    coordinates, nothing kept; c1's vectors are sketch-sized."""
    import torch

    from grpo_mse.config.gradient_evaluation import TracecovConfig

    argv = ["--oracle_table", "t.jsonl", "--skip_plot", "--save_json", str(tmp_path), "--M", "4", "--K_list", "4", "8"]
    config = TracecovConfig.from_argv(argv + ["--engine", "sketched", "--sketch_dim", "65536"])
    params = [torch.empty(3000, 100, device="meta"), torch.empty(50, device="meta")]
    shape = memory_plan.run_shape(params, config.run_sizes())
    assert (shape.row, shape.vector, shape.signs, shape.rows_per_pass) == (300_050 * 4, 8 * 65536, 300_050, 1)
    labels = len(config.estimators) + 1  # and the score (no biased estimator by default)
    expected = (2 * labels + memory_plan.SKETCH_TRANSIENTS) * 8 * 65536 + shape.backward() + 300_050
    assert shape.labels == labels and shape.statistics(5) == expected + memory_plan.SKETCH_BUFFERS
    assert shape.backward() == 2 * 3000 * 100 * 4 + shape.activations  # no gradient row: parameters sketched one by one
    plan = memory_plan.plan_run(shape, held=GB, available=100 * GB)
    assert plan.kept_rows == 0 and plan.c1_bytes == plan.c1_in_memory * 8 * 65536
    fast = memory_plan.run_shape(params, TracecovConfig.from_argv(argv).run_sizes())
    assert fast.vector == 300_050 * 4 and fast.signs == 0


def test_bf16_rows_form_c1_s_sum_in_a_new_float32_vector():
    """fp32 rows: the one sum c1 reads is formed in the first row's memory; bf16 rows (half a statistics vector) need
    a new float32 vector and one parameter's upcast beside the rows; without the advisor nothing is formed."""
    fp32 = qwen_shape()
    bf16 = qwen_shape(row=fp32.row // 2, largest=fp32.largest // 2)
    assert fp32.formed() == 0 and qwen_shape(c1_reads=3).formed() == 3 * fp32.vector
    assert bf16.formed() == fp32.vector + fp32.largest
    assert qwen_shape(row=fp32.row // 2, c1_reads=0).formed() == 0


def test_a_prompt_s_rows_are_kept_together_when_they_fit_and_fold_into_sums_when_not():
    small = memory_plan.plan_run(qwen_shape(m=2), held=2 * GB, available=20 * GB)
    assert small.kept_rows == 4 and small.fits()
    # M = 8: 16 rows of 1.98 GB cannot be kept on a 24 GB machine; the running sums take them a pass at a time
    big = memory_plan.plan_run(qwen_shape(m=8), held=2 * GB, available=20 * GB)
    assert big.fits() and big.kept_rows < 16
    assert big.statistics <= memory_plan.PLAN_MARGIN * 20 * GB
    assert big.essential == qwen_shape(m=8).statistics(0)


def test_c1_s_mean_gradients_go_to_files_when_memory_is_short():
    roomy = memory_plan.plan_run(qwen_shape(c1_vectors=16), held=2 * GB, available=40 * GB)
    tight = memory_plan.plan_run(qwen_shape(c1_vectors=16), held=2 * GB, available=12 * GB)
    assert roomy.c1_bytes <= C1_HOST_BYTES and roomy.c1_in_memory == C1_HOST_BYTES // roomy_vector()
    assert tight.c1_in_memory == 0 and tight.fits()
    assert tight.needed < roomy.needed


def roomy_vector() -> int:
    return qwen_shape().vector


def test_the_plan_line_is_one_line_with_its_parts():
    plan = memory_plan.plan_run(qwen_shape(), held=2_500_000_000, available=20 * GB)
    line = plan.line()
    assert "\n" not in line and re.match(r"^memory: about [\d.]+ GB needed, 22.5 GB available host memory \(", line)
    assert "model and libraries 2.5" in line and "4 rows kept" in line


def test_activations_grow_with_tokens_and_the_vocabulary():
    class Config:
        num_hidden_layers, hidden_size, intermediate_size, vocab_size = 24, 896, 4864, 151936

    one = memory_plan.activation_bytes(Config(), 40, 100, 4)
    assert memory_plan.activation_bytes(Config(), 80, 200, 4) == 2 * one
    layer_part = 24 * (16 * 896 + 3 * 4864) * 4
    assert one == 140 * layer_part + 100 * 4 * 151936 * 4  # logits of the continuation tokens only
    assert memory_plan.activation_bytes(object(), 40, 100, 4) == 0  # a model config without the sizes


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [
        ("4", "4", "2", "4"),
        ("16", "16", "4", "8", "16", "32"),
        # the sketched engine at d = 2^22: its statistics and transients (33.5 MB a vector) outweigh the model's
        ("8", "3", "2", "4", "--engine", "sketched", "--sketch_dim", "4194304", "--c1_batch", "4"),
    ],
)
def test_the_printed_estimate_is_within_25_percent_of_the_measured_peak(tmp_path, shape):
    """The built-in tiny policy through the command line: the plan's line before the run, the peak (VmHWM) after;
    at this size the process's own libraries dominate both. T 16, M 16, K 4 8 16 32 printed 1.06 GB against a
    0.55 GB peak before a pass's activations were those of its fullest K (issue 54, item 4); 0.65 against 0.60 after."""
    out = tmp_path / "tc"
    t, m, *k_list = shape
    extra = k_list[k_list.index("--engine") :] if "--engine" in k_list else []
    k_list = k_list[: len(k_list) - len(extra)]
    command = [sys.executable, "Gradient_evaluation/run_tracecov.py", "--model", "assets/tiny_policy", *extra]
    command += ["--oracle_table", str(DEMO_TABLE), "--device", "cpu", "--dtype", "fp32"]
    command += ["--T", t, "--M", m, "--K_list", *k_list, "--skip_plot", "--save_json", str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode == 0, result.stderr[-2000:]
    estimate, peak = estimate_and_peak(result.stderr)
    assert 0.75 * peak <= estimate <= 1.25 * peak, (estimate, peak)


def sizing(tmp_path, *argv) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/memory_plan.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_the_gpu_sizing_command_plans_qwen_shapes_from_meta_tensors(tmp_path):
    """scripts/memory_plan.py (docs/gpu.md): Qwen2.5-0.5B's 494,032,768 parameters in bf16 are held (2 bytes each);
    its plan is the engine's own (``run_shape`` + ``plan_run``) on what the GPU leaves; 7B's essentials (a 30 GB
    float32 statistics vector per running sum) exceed 80 GB even at one estimator, and fit a GPU four times larger."""
    out = tmp_path / "plan.json"
    result = sizing(
        tmp_path, "--qwen_shapes", "0.5B", "7B", "--tracecov_flags", "--M 4 --K_list 4 8", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    runs = {run["shape"]: run for run in json.loads(out.read_text())["runs"]}
    small, large = runs["0.5B"], runs["7B"]
    assert small["parameters"] == 494_032_768 and small["fits_as_asked"] and small["fits_with"] == []
    assert large["fits_with"] is None and min(p["essential_bytes"] for p in large["plans"]) > 80 * GB
    assert f"does not fit: at least {min(p['essential_bytes'] for p in large['plans']) / 1e9:.3g} GB" in result.stdout
    # held: the bf16 weights; the statistics: one float32 vector per running sum (3 estimators, 1 biased, the score)
    held = 2 * 494_032_768
    assert small["plans"][0]["line"].startswith("memory: about ")
    assert f"model and libraries {held / 1e9:.3g}" in small["plans"][0]["line"]
    larger = sizing(tmp_path, "--qwen_shapes", "7B", "--gpu_gb", "400", "--tracecov_flags", "--M 4 --K_list 4 8")
    assert larger.returncode == 0 and "-> fits" in larger.stdout, larger.stdout + larger.stderr


def test_the_gpu_sizing_command_refuses_a_wrong_run_flag_in_one_line(tmp_path):
    result = sizing(tmp_path, "--qwen_shapes", "0.5B", "--tracecov_flags", "--M 0")
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "--M" in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "flags, needle",
    [
        ('"unterminated', """--tracecov_flags '"unterminated': No closing quotation"""),
        ("--model foo", "--tracecov_flags: --model is not used by the plan (the model is each of --qwen_shapes)"),
        ("--M 4 --device=cpu", "--tracecov_flags: --device is not used by the plan (the plan is for one GPU"),
        ("--save_json out", "--tracecov_flags: --save_json is not used by the plan"),
    ],
)
def test_the_gpu_sizing_command_refuses_run_flags_it_cannot_read_or_would_ignore(tmp_path, flags, needle):
    """Issue 54, item 6: an unbalanced quote gave a ValueError traceback; --model foo was accepted and ignored (the
    plan is of --qwen_shapes), so a user would read Qwen's plan as foo's."""
    result = sizing(tmp_path, "--qwen_shapes", "0.5B", "--tracecov_flags", flags)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {needle}"), result.stderr


def test_max_memory_gb_caps_the_plan_and_refuses_below_the_essentials(tmp_path):
    """--max_memory_gb: the plan fills at most that much with the model and what the process holds; a cap below the
    essentials is refused in the one refusal line (exit 2 through the command line)."""
    import torch

    from grpo_mse.config.gradient_evaluation import TracecovConfig
    from grpo_mse.errors import UsageError

    params = [torch.zeros(1 << 20) for _ in range(4)]  # 16 MB of float32 "weights", above PARTIAL_GRAM_MIN
    held = allocator.process_resident()

    def config(cap: float):
        argv = ["--oracle_table", "t.jsonl", "--skip_plot", "--save_json", str(tmp_path), "--M", "4", "--T", "2"]
        return TracecovConfig.from_argv(argv + ["--max_memory_gb", str(cap)])

    plan = memory_plan.check_memory(params, config(held / GB + 0.5).run_sizes(), "cpu")
    assert plan.kind == "allowed by --max_memory_gb" and abs(plan.held + plan.available - held - 0.5 * GB) < 0.2 * GB
    assert plan.needed <= plan.held + plan.available
    with pytest.raises(UsageError, match=r"^memory: about .* GB needed at the least, .* allowed by --max_memory_gb"):
        memory_plan.check_memory(params, config(held / GB * 0.5).run_sizes(), "cpu")


def test_a_cap_below_what_the_model_holds_is_named_as_given_and_inf_is_refused(tmp_path):
    """Issue 54, item 5: ``--max_memory_gb 1e-9`` said "0.368 GB allowed by --max_memory_gb" (what the process held,
    not the cap) and named no way out; ``inf`` said "must be > 0 (got inf)". No cap is said by leaving the flag out."""
    import torch

    from grpo_mse.config.gradient_evaluation import TracecovConfig
    from grpo_mse.errors import UsageError

    argv = ["--oracle_table", "t.jsonl", "--skip_plot", "--save_json", str(tmp_path), "--M", "4", "--T", "2"]
    params = [torch.zeros(1 << 20) for _ in range(4)]
    with pytest.raises(UsageError) as refused:
        memory_plan.check_memory(
            params, TracecovConfig.from_argv([*argv, "--max_memory_gb", "1e-9"]).run_sizes(), "cpu"
        )
    assert " 1e-09 GB allowed by --max_memory_gb (model and libraries " in str(refused.value)
    assert str(refused.value).endswith("or raise --max_memory_gb") and "\n" not in str(refused.value)
    for text in ("inf", "Infinity"):
        with pytest.raises(UsageError, match=r"^--max_memory_gb inf: leave the flag out to plan with all the memory"):
            TracecovConfig.from_argv([*argv, "--max_memory_gb", text])
    with pytest.raises(UsageError, match=r"^--max_memory_gb must be a finite number > 0 \(got nan\)$"):
        TracecovConfig.from_argv([*argv, "--max_memory_gb", "nan"])


def test_the_plan_reads_a_typed_record_of_the_run_built_once_from_its_config():
    """Issue 57: the plan read ten fields of an untyped config (and the advisor's properties); it now reads
    ``RunSizes``, built by ``TracecovConfig.run_sizes``: c1's batch at most T and none without the advisor, three sums
    read a prompt with --advisor_estimator grpo_std, the cap as given."""
    import dataclasses

    import torch

    from grpo_mse.config.gradient_evaluation import TracecovConfig

    argv = ["--oracle_table", "t.jsonl", "--skip_plot", "--save_json", "out", "--device", "cpu", "--T", "3"]
    sizes = TracecovConfig.from_argv([*argv, "--M", "4", "--K_list", "2", "8", "--max_memory_gb", "5"]).run_sizes()
    assert sizes == memory_plan.RunSizes(
        estimators=("naive", "grpo", "oracleV"),
        m=4,
        k_list=(2, 8),
        max_new_tokens=32,
        engine="fast",
        groups_per_pass=0,
        c1_batch=3,  # --c1_batch 16 (the default) holds at most T mean gradients
        c1_reads=1,
        max_memory_gb=5.0,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        sizes.m = 8
    estimators = ["--estimators", "grpo", "grpo_std", "oracleV", "--advisor_estimator", "grpo_std"]
    assert TracecovConfig.from_argv([*argv, *estimators]).run_sizes().c1_reads == 3
    off = TracecovConfig.from_argv([*argv, "--no_advisor"]).run_sizes()
    assert (off.c1_batch, off.c1_reads) == (0, 0)
    shape = memory_plan.run_shape([torch.empty(10, device="meta")], off)
    assert (shape.c1_vectors, shape.c1_reads, shape.rows_per_prompt) == (0, 0, 2 * off.m)


def test_the_plan_and_the_engine_agree_which_models_are_model_sized():
    """The memory plan's kept rows (``RunShape.large``) and the fast engine's (``statistics.model_sized``) start at
    the same size, PARTIAL_GRAM_MIN coordinates: at exactly that size both keep rows."""
    import torch

    from grpo_mse.config.gradient_evaluation import TracecovConfig
    from grpo_mse.gradients.memory import PARTIAL_GRAM_MIN
    from grpo_mse.gradients.statistics import model_sized

    config = TracecovConfig.from_argv(["--oracle_table", "t.jsonl", "--skip_plot", "--save_json", "out"])
    for count, large in ((PARTIAL_GRAM_MIN - 1, False), (PARTIAL_GRAM_MIN, True), (PARTIAL_GRAM_MIN + 1, True)):
        params = [torch.empty(count - 5, device="meta"), torch.empty(5, device="meta")]
        assert model_sized(params) == memory_plan.run_shape(params, config.run_sizes()).large == large
