"""Host memory of the c1 batches and the torchrun shard layout (issue 18).

- ``c1_memory`` at Qwen2.5-1.5B shapes (a model on the meta device, no weights): at the default ``--c1_batch``
  the copies would take 99 GB of host memory per rank; with the spill to memory-mapped files the estimate fits
  in 32 GB.
- A batch whose mean gradients go to files gives a bit-identical Gram matrix and c1 record, holds in memory
  and on disk exactly what ``c1_memory`` says, and leaves no file behind.
- ``rank_batches``: every rank's prompt count within one of the others, batches never crossing ranks, one
  process = consecutive batches of --c1_batch prompts (so single-process results are unchanged).
"""

import glob
import os

import numpy as np
import pytest
import torch

from grpo_mse.distributed import rank_batches
from grpo_mse.gradients import memory, statistics
from grpo_mse.gradients.memory import c1_memory
from grpo_mse.gradients.statistics import BetweenPromptBatch
from grpo_mse.policy.logprobs import PromptSampler
from grpo_mse.policy.sampling import SamplingSettings
from grpo_mse.runs import advisor_hook
from grpo_mse.runs import tracecov as tracecov_job

GB = 1e9


def test_qwen2_5_1_5b_estimate_fits_32_gb_per_rank():
    from transformers import Qwen2ForCausalLM

    from studies.benchmarks.qwen_shapes import qwen2_5_config

    config = qwen2_5_config("1.5B")
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    count = sum(p.numel() for p in params)
    assert 1.53e9 < count < 1.55e9  # Qwen2.5-1.5B: 1.54B parameters (tied embeddings counted once)
    batch = tracecov_job.TracecovConfig.__dataclass_fields__["c1_batch"].default
    assert batch == 16
    plan = c1_memory(params, batch)
    assert plan["vector_bytes"] == 4 * count  # bf16 weights, float32 statistics
    everything = c1_memory(params, batch, host_bytes=10**15)  # the old layout: all copies in memory
    assert everything["on_disk"] == 0 and everything["host_bytes"] > 98 * GB
    assert plan["host_bytes"] <= 32 * GB
    assert plan["in_memory"] == statistics.C1_HOST_BYTES // plan["vector_bytes"] == 1
    assert plan["in_memory"] + plan["on_disk"] == batch and plan["disk_bytes"] == 15 * 4 * count
    line = advisor_hook.c1_memory_line(
        params, tracecov_job.TracecovConfig(oracle_table="t.jsonl", save_json="out", skip_plot=True), "out/tracecov_x"
    )
    assert "\n" not in line and "c1 memory per rank:" in line and f"{plan['host_bytes'] / GB:.3g} GB host" in line
    assert f"{plan['disk_bytes'] / GB:.3g} GB disk" in line


def test_the_estimate_counts_each_statistic_in_its_dtype():
    """float32 statistics for float16, bfloat16 and float32 models (4 bytes a value), float64 for float64 (8): the
    vectors and, when some are spilled, the chunk copied while one is written (the largest parameter's 12 values);
    no parameters: nothing to keep or spill (found by mutation testing, results/mutation)."""
    blocks = 2 * 2 * (1 << 18) * 8  # gram64's float64 working blocks for 2 vectors
    for dtype, size in ((torch.float16, 4), (torch.bfloat16, 4), (torch.float32, 4), (torch.float64, 8)):
        params = [torch.empty((3, 4), dtype=dtype, device="meta"), torch.empty(5, dtype=dtype, device="meta")]
        assert c1_memory(params, 2)["vector_bytes"] == 17 * size
        assert c1_memory(params, 2)["host_bytes"] == blocks + 2 * 17 * size  # both kept: no chunk
        assert c1_memory(params, 2, host_bytes=0)["host_bytes"] == blocks + 12 * size
    assert c1_memory([], 2) == {"vector_bytes": 0, "in_memory": 2, "on_disk": 0, "host_bytes": blocks, "disk_bytes": 0}


def _vectors(n, dtype=torch.float32):
    generator = torch.Generator().manual_seed(3)
    shapes = [(7, 5), (11,), (3, 2, 4)]
    return [
        [torch.randn(s, generator=generator, dtype=torch.float64).to(dtype) * (1 + i) for s in shapes] for i in range(n)
    ]


@pytest.mark.parametrize("host_vectors", [0, 2, 5])
def test_spilled_batch_is_bit_identical_and_holds_what_the_estimate_says(tmp_path, monkeypatch, host_vectors):
    vectors = _vectors(5)
    each = sum(t.numel() * 4 for t in vectors[0])
    plan = c1_memory(vectors[0], len(vectors), host_bytes=host_vectors * each)
    assert (plan["in_memory"], plan["on_disk"]) == (host_vectors, 5 - host_vectors)
    in_memory, spilled = BetweenPromptBatch(), BetweenPromptBatch(str(tmp_path / "run.c1.rank0"), host_vectors * each)
    written = []
    original = statistics.spill_to_file
    monkeypatch.setattr(statistics, "spill_to_file", lambda v, path: written.append(path) or original(v, path))
    for i, vector in enumerate(vectors):
        in_memory.add(vector, 0.1 * i, 3, prompt_index=10 + i)
        spilled.add(vector, 0.1 * i, 3, prompt_index=10 + i)
    files = sorted(glob.glob(str(tmp_path / "*.bin")))
    assert len(files) == len(written) == plan["on_disk"]
    assert sum(os.path.getsize(f) for f in files) == plan["disk_bytes"]
    assert spilled.kept_bytes == plan["in_memory"] * each
    for mapped, vector in zip(spilled.means, vectors):  # exact copies, same shapes
        assert all(torch.equal(a, b) for a, b in zip(mapped, vector))
    expected = in_memory.result()
    assert spilled.result() == expected  # every float of the Gram matrix and c1, bit for bit
    assert not glob.glob(str(tmp_path / "*.bin"))
    gram = np.array(
        [[sum(float((a.double() * b.double()).sum()) for a, b in zip(u, v)) for v in vectors] for u in vectors]
    )
    np.testing.assert_allclose(expected["gram"], gram, rtol=1e-12)
    # and the record against its definition from the explicit vectors (not another BetweenPromptBatch):
    # between = sum_i ||g_i - mean g||^2 / (n - 1), within = mean of tr / M, c1 = between - within
    flat = np.stack([torch.cat([t.reshape(-1) for t in v]).double().numpy() for v in vectors])
    between = float(((flat - flat.mean(0)) ** 2).sum()) / (len(vectors) - 1)
    within = float(np.mean([0.1 * i / 3 for i in range(len(vectors))]))
    assert expected["between"] == pytest.approx(between, rel=1e-12)
    assert expected["within"] == pytest.approx(within, rel=1e-12) and expected["within_each"][1] == 0.1 / 3
    assert expected["c1"] == pytest.approx(between - within, rel=1e-12)


def test_spill_round_trip_keeps_bf16_and_float64_values(tmp_path):
    for dtype in (torch.bfloat16, torch.float64):
        (vector,) = _vectors(1, dtype)
        mapped = statistics.spill_to_file(vector, str(tmp_path / f"{dtype}.bin"))
        assert all(m.dtype == dtype and torch.equal(m, v) for m, v in zip(mapped, vector))
        assert os.path.getsize(tmp_path / f"{dtype}.bin") == sum(v.numel() * v.element_size() for v in vector)


def test_large_parameter_is_written_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "SPILL_CHUNK", 7)  # the writer's chunk and the plan's
    vector = [torch.arange(30, dtype=torch.float32).view(5, 6), torch.arange(3, dtype=torch.float32)]
    mapped = statistics.spill_to_file(vector, str(tmp_path / "v.bin"))
    assert all(torch.equal(m, v) for m, v in zip(mapped, vector))
    gram_blocks = 2 * 4 * (2**19 // 4) * 8  # gram64's float64 working blocks for 4 vectors
    assert c1_memory(vector, 4, host_bytes=0)["host_bytes"] == gram_blocks + 7 * 4  # + one chunk of 7 floats


@pytest.mark.parametrize("count", [1, 2, 5, 16, 17, 33, 100, 500])
@pytest.mark.parametrize("size", [1, 3, 16])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_rank_batches_balance_prompts_and_keep_batches_on_one_rank(count, size, world):
    layout = rank_batches(count, size, world)
    assert len(layout) == world
    per_rank = [sum(len(b) for b in batches) for batches in layout]
    assert max(per_rank) - min(per_rank) <= 1 and sum(per_rank) == count
    flat = [i for batches in layout for batch in batches for i in batch]
    assert flat == list(range(count))  # every prompt once, in order; each batch lies in one rank's range
    assert all(1 <= len(b) <= size and b == list(range(b[0], b[0] + len(b))) for batches in layout for b in batches)
    if world == 1:
        assert layout[0] == [list(range(s, min(s + size, count))) for s in range(0, count, size)]


def test_rank_batches_balance_where_whole_batches_could_not():
    """T = 100, --c1_batch 16 on 8 ranks: whole batches gave 16, 16, ..., 4, 0 prompts; now 13 or 12."""
    layout = rank_batches(100, 16, 8)
    assert [sum(map(len, b)) for b in layout] == [13, 13, 13, 13, 12, 12, 12, 12]
    assert layout[1] == [list(range(13, 26))]


def test_run_batch_with_every_mean_gradient_on_disk_gives_the_same_c1_record(builtin_policy, tmp_path, monkeypatch):
    """TracecovRun.run_batch (the path of run_tracecov.py) with C1_HOST_BYTES = 0: the batch's files appear in
    the run folder, are gone after the batch, and its c1 record equals the in-memory one exactly."""
    from grpo_mse.builtin.arithmetic import make_rows
    from grpo_mse.config.gradient_evaluation import TracecovConfig
    from grpo_mse.policy.loading import eos_token_ids

    model, tokenizer = builtin_policy
    rows = [{**row, "V_oracle": 0.5} for row in make_rows(3, seed=2)]
    config = TracecovConfig(
        oracle_table="rows",
        save_json=str(tmp_path),
        skip_plot=True,
        M=2,
        K_list=[2],
        max_new_tokens=4,
        device="cpu",
        estimators=["grpo", "oracleV"],
    )

    def batch_record(name):
        settings = SamplingSettings(tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, 1.0, 0.95, 4)
        sampler = PromptSampler(model, tokenizer, settings, 64, 0)
        base = str(tmp_path / name)
        hook = advisor_hook.AdvisorHook(config, [[0, 1, 2]], base, host_bytes=memory.C1_HOST_BYTES)
        run = tracecov_job.TracecovRun(config, sampler, rows, [r["id"] for r in rows], base=base, advisor=hook)
        run.run_batch(0, [0, 1, 2], 2)
        return run.advisor.batches[(2, (0, 1, 2))]

    kept = batch_record("memory")
    written = []
    original = statistics.spill_to_file
    monkeypatch.setattr(statistics, "spill_to_file", lambda v, path: written.append(path) or original(v, path))
    monkeypatch.setattr(memory, "C1_HOST_BYTES", 0)
    spilled = batch_record("disk")
    assert written == [str(tmp_path / f"disk.c1.rank0.{j}.bin") for j in range(3)]
    assert not glob.glob(str(tmp_path / "*.bin"))
    assert spilled == kept and spilled.prompt_indices == [0, 1, 2] and spilled.c1_batch == 0

    evaluate, calls = tracecov_job.TracecovRun.evaluate_prompt, []

    def crashing(run, index, k, drawn=None):
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated crash")
        calls.append(index)
        return evaluate(run, index, k, drawn)

    monkeypatch.setattr(tracecov_job.TracecovRun, "evaluate_prompt", crashing)
    with pytest.raises(KeyboardInterrupt):
        batch_record("crash")
    assert len(written) == 5 and not glob.glob(str(tmp_path / "*.bin"))  # two files written, both removed


def test_c1_memory_line_is_sized_to_the_run_s_largest_batch():
    vectors = _vectors(1)[0]
    config = tracecov_job.TracecovConfig(oracle_table="t.jsonl", save_json="out", skip_plot=True)
    default, two = (advisor_hook.c1_memory_line(vectors, config, "out/x", batch) for batch in (None, 2))
    for line, batch in ((default, config.c1_batch), (two, 2)):
        plan = c1_memory(vectors, batch * config.c1_copies)
        assert f"{plan['host_bytes'] / GB:.3g} GB host ({plan['in_memory']} of" in line
    assert "2 (the run's largest batch)" in two and f"--c1_batch {config.c1_batch}" in default
    assert c1_memory(vectors, 2)["host_bytes"] < c1_memory(vectors, 16)["host_bytes"]


def test_an_owned_mean_gradient_is_kept_without_a_copy_and_gives_the_same_record():
    vectors = _vectors(3)
    copied, owned = BetweenPromptBatch(), BetweenPromptBatch()
    for i, vector in enumerate(vectors):
        copied.add(vector, 0.1 * i, 3)
        fresh = [t.clone() for t in vector]
        owned.add(fresh, 0.1 * i, 3, owned=True)
        assert all(m.data_ptr() == t.data_ptr() for m, t in zip(owned.means[-1], fresh))
    assert all(m.data_ptr() != v.data_ptr() for m, v in zip(copied.means[0], vectors[0]))
    kept = owned.means[0]
    assert all(torch.equal(k, v) for k, v in zip(kept, vectors[0]))
    assert owned.result() == copied.result()


def test_pooled_means_go_back_to_the_pool_when_the_batch_ends():
    from grpo_mse.gradients.statistics import BufferPool, SumTrace

    pool, vectors = BufferPool(), _vectors(3)
    pooled, plain = BetweenPromptBatch(pool=pool), BetweenPromptBatch()
    for i, vector in enumerate(vectors):
        stats = SumTrace(vector, pool)
        stats.update(vector)
        stats.update([2 * t for t in vector])
        pooled.add(stats.mean(), 0.1 * i, 3, owned=True)
        plain.add(stats.mean(), 0.1 * i, 3)
        stats.release()
    assert len(pooled.pooled) == 3
    assert pooled.result() == plain.result()  # result() discards: the three means' buffers return to the pool
    assert sum(map(len, pool.free.values())) == 4 and not pooled.pooled  # 3 means + 1 reused running-sum buffer


def test_a_handed_over_running_sum_with_its_scale_gives_the_mean_gradients_record(monkeypatch):
    """c1_vectors hands a pooled model-sized running sum T over with scale 1 / n (threshold lowered here) instead
    of computing T / n: the c1 record equals the one from the means up to float32 rounding of T / n; an
    accumulator used twice (std-GRPO standing in for its own-target difference) is not handed over."""
    import grpo_mse.gradients.statistics as statistics
    from grpo_mse.gradients.engine import PromptStats
    from grpo_mse.gradients.statistics import BufferPool, SumTrace

    monkeypatch.setattr(statistics, "PARTIAL_GRAM_MIN", 1)
    pool, vectors = BufferPool(), _vectors(6)
    handed, means = BetweenPromptBatch(pool=pool), BetweenPromptBatch()
    for i in range(3):
        oracle, std = SumTrace(vectors[0], pool), SumTrace(vectors[0], pool)
        for stats in (oracle, std):
            for vector in vectors[2 * i : 2 * i + 2]:
                stats.update([3.0 * t for t in vector] if stats is std else vector)
        prompt = PromptStats({}, {advisor_hook.ORACLE: oracle, advisor_hook.est.GRPO_STD: std}, {})
        record = type("Record", (), {"tr_cov": {advisor_hook.ORACLE: 0.5, advisor_hook.est.GRPO_STD: 0.25}})()
        expected = [t / 2 for t in oracle.sums]
        out = advisor_hook.c1_vectors(prompt, record)
        assert [scale for _, _, scale in out] == [0.5, 1.0, 1.0]  # std-GRPO is used twice: its mean, twice
        assert oracle.sums is None and std.sums is not None  # the oracle's sum was handed over
        handed.add(out[0][0], out[0][1], 2, i, owned=True, scale=out[0][2])
        means.add(expected, 0.5, 2, i)
        prompt.release()
    assert len(handed.pooled) == 3
    got, want = handed.result(), means.result()
    np.testing.assert_allclose(got["gram"], want["gram"], rtol=1e-6)
    assert got["c1"] == pytest.approx(want["c1"], rel=1e-5) and got["within"] == want["within"]
    assert sum(map(len, pool.free.values())) == 4  # the 3 handed-over sums and the last std-GRPO sum


def test_a_batch_hands_back_only_the_means_it_owns_and_takes_a_one_parameter_model(tmp_path):
    """A one-parameter model's mean gradients, kept (owned, from the pool), copied or spilled to a file, give the
    between-prompt variance of the explicit means (float64) and the prompts' positions by default; a mean the
    caller still holds (not owned) never goes to the pool, so no later sum is handed the caller's buffer."""
    from grpo_mse.gradients.statistics import BufferPool, SumTrace

    rng, pool = np.random.default_rng(9), BufferPool()
    kept, copied = BetweenPromptBatch(pool=pool), BetweenPromptBatch(pool=pool)
    spilled, held, means = BetweenPromptBatch(str(tmp_path / "one.c1"), host_bytes=0), [], []
    for _ in range(3):
        rows = rng.normal(size=(2, 6))
        stats = SumTrace([torch.zeros(6)], pool)
        for row in rows:
            stats.update([torch.tensor(row, dtype=torch.float32)])
        held.append(stats.mean())  # views of a pooled buffer that the caller keeps
        kept.add(stats.mean(), 0.3, 2, owned=True)
        copied.add(held[-1], 0.3, 2)
        spilled.add(held[-1], 0.3, 2)
        stats.release()
        means.append(rows.astype(np.float32).astype(np.float64).mean(0))
    means = np.stack(means)
    between = float(((means - means.mean(0)) ** 2).sum()) / 2
    for batch in (kept, copied, spilled):
        result = batch.result()
        assert result["between"] == pytest.approx(between, rel=1e-6) and result["prompt_indices"] == [0, 1, 2]
    assert len(pool.free[(6, torch.float32, torch.device("cpu"))]) == 4  # the kept means' buffers and one sum's
    for _ in range(4):
        pool.take(6, torch.float32, "cpu").fill_(np.nan)  # every buffer the pool hands out again
    for mean, expected in zip(held, means):
        np.testing.assert_allclose(mean[0].double().numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("batch", [2, 16, 64, 200])
def test_the_gram_working_blocks_are_twice_the_buffer_gram64_allocates(monkeypatch, batch):
    """The working term of the estimate (nothing spilled) against gram64's own float64 buffer, caught as it is
    allocated, for a batch of long mean gradients (meta tensors, 2^21 coordinates in two parameters): twice the
    buffer (the buffer and the product's operand copy), also past 32 vectors, where gram64's block stops
    shrinking at CPU_SMALLEST_BLOCK coordinates (a formula with a lower floor underestimated batches > 32)."""
    params = [torch.empty((1 << 10, 1 << 10), device="meta"), torch.empty(1 << 20, device="meta")]
    allocated = []
    empty = torch.empty

    def recording_empty(*args, **kwargs):
        tensor = empty(*args, **kwargs)
        if tensor.dtype == torch.float64:
            allocated.append(tensor.numel() * 8)
        return tensor

    monkeypatch.setattr(torch, "empty", recording_empty)
    statistics.gram64([params] * batch)
    plan = c1_memory(params, batch, host_bytes=10**15)
    buffer = max(allocated)  # the others are [batch, batch] matrices
    assert plan["on_disk"] == 0 and buffer >= batch * memory.CPU_SMALLEST_BLOCK * 8
    assert plan["host_bytes"] - batch * plan["vector_bytes"] == 2 * buffer
