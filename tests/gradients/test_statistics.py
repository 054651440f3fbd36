import numpy as np
import pytest
import torch

from grpo_mse.gradients.statistics import BetweenPromptBatch, BufferPool, SumTrace, dot64, gram64
from grpo_mse.gradients.trace_engines.reference import WelfordTrace
from studies.benchmarks.memory_estimates import statistics_bytes


def _as_params(flat: np.ndarray, shapes) -> list[torch.Tensor]:
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(torch.tensor(flat[start : start + size], dtype=torch.float32).reshape(shape))
        start += size
    return out


def test_trace_statistics_equal_numpy_trace_of_sample_covariance():
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (5,), (2, 2, 2)]
    dim = sum(int(np.prod(s)) for s in shapes)
    for m in (2, 3, 16):
        samples = rng.normal(loc=rng.normal(size=dim) * 3, scale=rng.uniform(0.1, 2, size=dim), size=(m, dim))
        expected = np.trace(np.cov(samples, rowvar=False, ddof=1))
        like = _as_params(samples[0], shapes)
        welford, sums = WelfordTrace(like), SumTrace(like)
        for row in samples:
            vector = _as_params(row, shapes)
            welford.update(vector)
            sums.update(vector)
        assert np.isclose(welford.trace(), expected, rtol=1e-5)
        assert np.isclose(sums.trace(), expected, rtol=1e-5)
        np.testing.assert_allclose(
            torch.cat([t.reshape(-1) for t in sums.mean()]).numpy(), samples.mean(0), rtol=1e-5, atol=1e-5
        )
    assert statistics_bytes(sums) * 2 == statistics_bytes(welford)


def test_pass_of_combinations_equals_explicit_vectors():
    """Passes of x_g = sum_r C[g, r] v_r (Gram scalars only) give the same trace, mean and M2 as the vectors."""
    rng = np.random.default_rng(1)
    rows = [[torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32)] for _ in range(4)]
    passes = [
        torch.tensor([[1.0, -0.3, 0, 0], [0, 0, 2.0, 0.5]]),
        torch.tensor([[-1.5, 0, 0, 0]]),
        torch.tensor([[0, 0, 0.7, 0.0], [0, 1.0, 0, 1.0], [0.2, 0.2, 0.2, 0.2]]),
    ]
    combined, explicit = SumTrace(rows[0]), SumTrace(rows[0])
    for coefficients in passes:
        gram = gram64(rows + [combined.total])
        combined.add_pass(coefficients.double(), rows, gram[:4, :4], gram[4, :4], float(gram[4, 4]))
        for c in coefficients:
            explicit.update([sum(float(cr) * row[0] for cr, row in zip(c, rows))])
    vectors = np.stack(
        [
            sum(float(cr) * row[0].double().numpy().reshape(-1) for cr, row in zip(c, rows))
            for coefficients in passes
            for c in coefficients
        ]
    )
    expected = np.trace(np.cov(vectors, rowvar=False, ddof=1))
    assert combined.count == explicit.count == 6
    assert np.isclose(combined.trace(), expected, rtol=1e-6) and np.isclose(explicit.trace(), expected, rtol=1e-6)
    torch.testing.assert_close(combined.mean()[0], torch.tensor(vectors.mean(0), dtype=torch.float32).view(4, 3))


def test_running_sums_keep_float64_accuracy_when_the_spread_is_tiny():
    """A large common mean and a tiny spread: tr Cov stays accurate (identical vectors give exactly 0),
    where the textbook (sum ||x||^2 - ||sum x||^2 / M) / (M - 1) with an fp32 sum loses all digits."""
    rng = np.random.default_rng(2)
    common = rng.normal(size=5000) * 100
    spread = rng.normal(size=(8, 5000)) * 1e-3
    samples = (common + spread).astype(np.float32).astype(np.float64)
    expected = np.trace(np.cov(samples, rowvar=False, ddof=1))
    sums = SumTrace([torch.zeros(5000)])
    for row in samples:
        sums.update([torch.tensor(row, dtype=torch.float32)])
    assert sums.trace() == pytest.approx(expected, rel=1e-4)
    textbook_total = torch.tensor(samples, dtype=torch.float32).sum(0).double()
    textbook = (float((samples**2).sum()) - float(textbook_total @ textbook_total) / 8) / 7
    assert abs(textbook - expected) > expected  # the rounding the merge avoids
    same = SumTrace([torch.zeros(5000)])
    for _ in range(3):
        same.update([torch.tensor(samples[0], dtype=torch.float32)])
    assert same.trace() == 0.0


def test_dot64_matches_float64_dot_products():
    """Blocked float64 dots equal exact float64 dot products (sizes around the block size)."""
    gen = torch.Generator().manual_seed(3)
    left = [torch.randn(*shape, generator=gen) for shape in [(10_000,), (3, 4096), (7,), (64, 65)]]
    right = [x + 1e-3 * torch.randn(x.shape, generator=gen) for x in left]
    exact = sum(float(torch.dot(a.reshape(-1).double(), b.reshape(-1).double())) for a, b in zip(left, right))
    assert dot64(left, right) == pytest.approx(exact, rel=1e-12)
    assert dot64(left, right, block=100) == pytest.approx(exact, rel=1e-12)
    assert dot64(left, [-x for x in right]) == pytest.approx(-exact, rel=1e-12)


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 22])
def test_gram64_equals_float64_dot_products(block):
    """Column blocks of any width (straddling parameter boundaries) give the exact float64 Gram matrix."""
    gen = torch.Generator().manual_seed(0)
    vectors = [[torch.randn(*shape, generator=gen) for shape in [(5, 4), (3,), (2, 3, 2)]] for _ in range(3)]
    flat = torch.stack([torch.cat([t.reshape(-1) for t in v]) for v in vectors]).double()
    torch.testing.assert_close(gram64(vectors, block=block), flat @ flat.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block", [1, 7, 1 << 22])
@pytest.mark.parametrize("rows", [1, 2, 3])
def test_gram64_of_a_pass_gives_its_rows_against_everything_and_the_sums_own_squares(block, rows):
    """gram64(..., rows=R): the R gradient rows against all vectors and the diagonal of the running sums, exact in
    float64 as the full matrix; the sums' cross terms (never used) are NaN, not silently wrong."""
    gen = torch.Generator().manual_seed(1)
    vectors = [[torch.randn(*shape, generator=gen) for shape in [(5, 4), (3,), (2, 3, 2)]] for _ in range(5)]
    flat = torch.stack([torch.cat([t.reshape(-1) for t in v]) for v in vectors]).double()
    exact, gram = flat @ flat.T, gram64(vectors, block=block, rows=rows)
    torch.testing.assert_close(gram[:rows], exact[:rows], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gram[:, :rows], exact[:, :rows], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gram.diagonal(), exact.diagonal(), rtol=1e-12, atol=1e-12)
    off = ~torch.eye(5 - rows, dtype=torch.bool)
    assert torch.isnan(gram[rows:, rows:][off]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_running_sum_is_written_by_its_first_addition_and_equals_a_zero_started_sum(dtype):
    """No model-sized zero fill: T is allocated by the first nonzero addition (T = c v), in the statistics
    dtype (fp32 for bf16 and fp16 gradients), and every later pass gives the bits of a sum started from zeros."""
    rng = np.random.default_rng(3)
    like = [torch.zeros((3, 2), dtype=dtype), torch.zeros(5, dtype=dtype)]
    rows = [[torch.tensor(rng.normal(size=tuple(p.shape)), dtype=dtype) for p in like] for _ in range(2)]
    lazy, zero_started = SumTrace(like), SumTrace(like)
    zero_started.total  # noqa: B018 - materialise the zeros the old code started from
    assert lazy.sums is None
    for coefficients in (torch.tensor([[0.0, 0.7], [0.0, -1.3]]), torch.tensor([[2.0, 0.25]])):
        for stats in (lazy, zero_started):
            gram = gram64(rows + [stats.total]) if stats.count else gram64(rows)
            dots, square = (
                (gram[2, :2], float(gram[2, 2])) if stats.count else (torch.zeros(2, dtype=torch.float64), 0.0)
            )
            stats.add_pass(coefficients.double(), rows, gram[:2, :2], dots, square)
        assert lazy.sums[0].dtype == torch.float32
        for a, b in zip(lazy.total, zero_started.total):
            assert torch.equal(a, b)
    assert lazy.m2 == zero_started.m2 and statistics_bytes(lazy) == statistics_bytes(zero_started) == 11 * 4


def test_pooled_running_sums_reuse_released_buffers_and_keep_every_bit():
    """SumTrace with a BufferPool: T lives in a flat buffer from the pool; after ``release`` the next prompt's sums
    get the same buffer (stale values and all) and still give the bits of sums that own fresh tensors."""
    from grpo_mse.gradients.statistics import BufferPool

    like = [torch.zeros((3, 2)), torch.zeros(5)]
    pool = BufferPool()

    def run(stats, seed):
        gen = np.random.default_rng(seed)
        rows = [[torch.tensor(gen.normal(size=tuple(p.shape)), dtype=torch.float32) for p in like] for _ in range(2)]
        for coefficients in (torch.tensor([[0.0, 0.7], [1.5, -1.3]]), torch.tensor([[2.0, 0.25]])):
            gram = gram64(rows + [stats.total]) if stats.count else gram64(rows)
            dots, square = (gram[2, :2], float(gram[2, 2])) if stats.count else (torch.zeros(2).double(), 0.0)
            stats.add_pass(coefficients.double(), rows, gram[:2, :2], dots, square)
        return stats

    first = run(SumTrace(like, pool), 1)
    pointers = {first.sums[0].data_ptr()}
    first.release()
    assert first.sums is None and sum(map(len, pool.free.values())) == 1
    for seed in (2, 3):
        pooled, fresh = run(SumTrace(like, pool), seed), run(SumTrace(like), seed)
        assert pooled.sums[0].data_ptr() in pointers  # a released buffer, not a new allocation
        assert pooled.m2 == fresh.m2 and all(torch.equal(a, b) for a, b in zip(pooled.sums, fresh.sums))
        mean = pooled.mean()  # a second flat buffer from the pool, the same values as T / n
        assert all(torch.equal(a, b) for a, b in zip(mean, fresh.mean())) and mean[0]._base is not None
        assert mean[0].data_ptr() != pooled.sums[0].data_ptr()
        pooled.release()
        pool.give(mean[0]._base)
        pointers.add(mean[0].data_ptr())
    zeros = SumTrace(like, pool)
    zeros.count = 1
    assert all(torch.equal(t, torch.zeros_like(t)) for t in zeros.total)  # a pooled zero sum is zero-filled


def test_a_deferred_first_pass_forms_the_same_sum_only_when_read():
    """``defer``: the first pass's M2 is the undeferred one's; T stays its terms (no addition, no buffer) with
    <T, T> known exactly, and once read (``total``, ``mean``, ``hand_over``, a second pass) it has the bits of
    the undeferred sum, by the same additions in the same order. ``release`` drops the terms."""
    rng = np.random.default_rng(5)
    like = [torch.zeros((4, 3)), torch.zeros(7)]
    rows = [[torch.tensor(rng.normal(size=tuple(p.shape)), dtype=torch.float32) for p in like] for _ in range(3)]
    coefficients = torch.tensor([[0.5, 0.0, -1.25], [0.0, 2.0, 0.75]], dtype=torch.float64)
    gram = gram64(rows)
    for read in ("total", "mean", "hand_over", "second pass"):
        deferred, eager = SumTrace(like), SumTrace(like)
        for stats, defer in ((deferred, True), (eager, False)):
            stats.add_pass(coefficients, rows, gram, torch.zeros(3, dtype=torch.float64), 0.0, defer=defer)
        assert deferred.m2 == eager.m2 and deferred.count == eager.count == 2
        assert deferred.sums is None and len(deferred.terms) == 3  # each row's summed coefficient is nonzero
        explicit = sum(
            float(c) * torch.cat([t.reshape(-1) for t in row]).double() for c, row in zip([0.5, 2.0, -0.5], rows)
        )
        assert deferred.total_sq == pytest.approx(float(explicit @ explicit), rel=1e-12)
        if read == "second pass":
            for stats in (deferred, eager):
                g = gram64(rows[:1] + [stats.total])
                stats.add_pass(torch.ones((1, 1), dtype=torch.float64), rows[:1], g[:1, :1], g[1, :1], float(g[1, 1]))
            assert deferred.m2 == eager.m2
        formed = {"mean": lambda s: s.mean(), "hand_over": lambda s: s.hand_over()}.get(read, lambda s: s.total)
        for a, b in zip(formed(deferred), formed(eager)):
            assert torch.equal(a, b)
        assert deferred.terms is None and deferred.total_sq is None
    released = SumTrace(like)
    released.add_pass(coefficients, rows, gram, torch.zeros(3, dtype=torch.float64), 0.0, defer=True)
    released.release()
    assert released.terms is None and released.sums is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients_keep_float32_statistics_that_agree_with_a_float32_run(dtype):
    """fp16 and bf16 models' gradients are summed in float32 (``memory.stats_dtype``): the trace and mean of
    half-precision vectors equal those of the same values given in float32, and numpy's float64 covariance. With
    float16 running sums a common mean of 30 and a spread of 0.1 (a sum of 16 near 480, float16's step 0.25) would
    lose the spread (issue 58)."""
    rng = np.random.default_rng(4)
    shapes = [(3, 4), (5,)]
    samples = 30.0 + rng.normal(scale=0.1, size=(16, 17))
    half = [_as_params(row, shapes) for row in samples]
    half = [[t.to(dtype) for t in vector] for vector in half]
    exact = np.stack([torch.cat([t.reshape(-1) for t in v]).double().numpy() for v in half])  # the values given
    expected = np.trace(np.cov(exact, rowvar=False, ddof=1))
    for kind in (WelfordTrace, SumTrace):
        low, single = kind(half[0]), kind([t.float() for t in half[0]])
        for vector in half:
            low.update(vector)
            single.update([t.float() for t in vector])
        assert all(t.dtype == torch.float32 for t in low.mean())
        assert low.trace() == pytest.approx(single.trace(), rel=1e-6)
        assert low.trace() == pytest.approx(expected, rel=1e-3)
        for a, b in zip(low.mean(), single.mean()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def _rows(rng, like, count):
    """``count`` random gradient rows shaped and typed like ``like``."""
    return [[torch.tensor(rng.normal(size=tuple(p.shape)), dtype=p.dtype) for p in like] for _ in range(count)]


def _pass(stats, rows, coefficients):
    """One ``SumTrace.add_pass`` of x_g = sum_r coefficients[g, r] rows[r], with the Gram scalars it needs."""
    coefficients = torch.tensor(coefficients, dtype=torch.float64)
    if not stats.count:
        gram = gram64(rows)
        return stats.add_pass(coefficients, rows, gram, torch.zeros(len(rows), dtype=torch.float64), 0.0)
    gram = gram64(rows + [stats.total])
    stats.add_pass(coefficients, rows, gram[:-1, :-1], gram[-1, :-1], float(gram[-1, -1]))


def _explicit(rows, passes) -> np.ndarray:
    """The vectors x_g of ``passes`` over ``rows``, formed in float64 from the rows' values."""
    flat = [torch.cat([t.reshape(-1) for t in row]).double().numpy() for row in rows]
    return np.stack([sum(c * r for c, r in zip(g, flat)) for coefficients in passes for g in coefficients])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_pooled_running_sums_and_means_keep_the_statistics_dtype(dtype):
    """With the run's BufferPool the running sums and means are in the statistics dtype of the vectors
    (``memory.stats_dtype``: float64 for a float64 model, float32 for half precision) and equal the float64
    mean of the explicit vectors to that precision: a pooled buffer in another dtype (float32 for a float64
    model), or a half-precision first addition T = c v rounded before it is upcast, would be off by 1e-8 (float64)
    or 1e-3 (half precision). Found by mutation testing (results/mutation)."""
    rng = np.random.default_rng(6)
    like = [torch.zeros((3, 4), dtype=dtype), torch.zeros(5, dtype=dtype)]
    rows = _rows(rng, like, 3)
    passes = [[[0.3, 0.0, 1.7], [0.0, -0.45, 0.0]], [[1.1, 0.2, 0.0], [0.0, 0.0, -2.3]]]
    expected = _explicit(rows, passes)
    stats_dtype, rel = (torch.float64, 1e-13) if dtype == torch.float64 else (torch.float32, 1e-6)
    pool = BufferPool()
    for _ in range(2):  # a fresh pool's buffers, then the ones handed back
        stats = SumTrace(like, pool)
        for coefficients in passes:
            _pass(stats, rows, coefficients)
        mean = stats.mean()
        assert all(t.dtype == stats_dtype for t in stats.total + mean)
        np.testing.assert_allclose(
            torch.cat([t.reshape(-1) for t in mean]).double(), expected.mean(0), rtol=0, atol=rel
        )
        assert stats.trace() == pytest.approx(np.trace(np.cov(expected, rowvar=False, ddof=1)), rel=rel)
        stats.release()
        pool.give(mean[0]._base)


def test_pooled_running_sums_and_gram_matrices_live_on_the_vectors_device():
    """A pooled buffer, a running sum and a Gram matrix with its float64 working buffer are made on the vectors'
    device (a CUDA run's on the GPU): meta tensors stand in here."""
    like = [torch.empty((3, 4), device="meta"), torch.empty(5, device="meta")]
    pool = BufferPool()
    assert pool.take(7, torch.float64, "meta").device.type == "meta"
    stats = SumTrace(like, pool)
    stats.accumulate([torch.empty_like(p) for p in like], 0.5)
    assert all(t.device.type == "meta" for t in stats.sums + stats.mean())
    for rows in (None, 1):
        assert gram64([like, like, like], rows=rows).device.type == "meta"


def test_pooled_running_sums_of_mixed_dtypes_keep_each_parameter_s_dtype():
    """A model with float64 and float32 parameters: no one flat pooled buffer, each sum in its own statistics dtype."""
    rng = np.random.default_rng(10)
    like = [torch.zeros((3, 4), dtype=torch.float64), torch.zeros(5)]
    rows = _rows(rng, like, 2)
    stats = SumTrace(like, BufferPool())
    _pass(stats, rows, [[0.3, 0.0], [0.0, 1.7]])
    assert [t.dtype for t in stats.total] == [torch.float64, torch.float32] and stats.flat is None
    np.testing.assert_allclose(stats.total[0].numpy(), 0.3 * rows[0][0].numpy() + 1.7 * rows[1][0].numpy(), rtol=1e-14)


def test_gram64_s_float64_buffer_is_one_block_for_small_vectors_and_cache_sized_for_long_ones(monkeypatch):
    """On the CPU, vectors of at most 2^20 coordinates are one block (the built-in policies' bits); longer ones
    (every real model) go through a float64 buffer of at most CPU_BLOCK_BYTES for all of them. Either way the
    Gram matrix, full or of a pass's rows, is the exact float64 one."""
    from grpo_mse.gradients import memory, statistics

    gen = torch.Generator().manual_seed(11)
    buffers = []

    def empty(*shape, **kwargs):
        tensor = torch.zeros(*shape, **kwargs)  # a spy on the buffer's size
        buffers.append(tensor.numel()) if tensor.dtype == torch.float64 and tensor.dim() == 2 else None
        return tensor

    monkeypatch.setattr(statistics.torch, "empty", empty)
    for shapes, most in (
        ([(1 << 10, 1 << 10)], 3 << 20),
        ([(1 << 10, 1 << 10), (7,), (3000,)], memory.CPU_BLOCK_BYTES // 8),
    ):
        vectors = [[torch.randn(*shape, generator=gen) for shape in shapes] for _ in range(3)]
        flat = torch.stack([torch.cat([t.reshape(-1) for t in v]) for v in vectors]).double()
        for rows in (None, 1):
            buffers.clear()
            gram = gram64(vectors, rows=rows)
            torch.testing.assert_close(gram[:1], (flat @ flat.T)[:1], rtol=1e-12, atol=1e-9)
            torch.testing.assert_close(gram.diagonal(), (flat * flat).sum(1), rtol=1e-12, atol=1e-9)
            if most == 3 << 20:
                assert buffers == [most]  # one block: each vector whole
            else:
                assert 0 < max(buffers) <= most


def test_a_run_of_pooled_prompts_reuses_its_buffers_and_gives_the_between_prompt_variance():
    """Prompt after prompt (running sums from the pool, their means kept by a c1 batch, the sums released, the batch's
    means handed back by ``result``) the pool holds the same buffers: each mean is taken from it, none is allocated
    afresh (a run would otherwise keep c1_batch more model-sized buffers per batch). Each batch's between-prompt
    variance is the float64 one of the prompts' explicit means."""
    rng = np.random.default_rng(7)
    like = [torch.zeros((4, 3)), torch.zeros(6)]
    pool, sizes = BufferPool(), []
    for _ in range(4):
        batch, means = BetweenPromptBatch(pool=pool), []
        for _ in range(3):
            rows = _rows(rng, like, 2)
            passes = [[[1.0, 0.0], [0.5, -1.5]], [[0.0, 2.0]]]
            stats = SumTrace(like, pool)
            for coefficients in passes:
                _pass(stats, rows, coefficients)
            vector, scale = stats.kept_mean(alone=True)
            batch.add(vector, stats.trace(), 3, owned=True, scale=scale)
            stats.release()
            means.append(_explicit(rows, passes).mean(0))
        result = batch.result()
        means = np.stack(means)
        assert result["between"] == pytest.approx(float(((means - means.mean(0)) ** 2).sum()) / 2, rel=1e-6)
        sizes.append(sum(map(len, pool.free.values())))
    assert sizes == [sizes[0]] * 4 and sizes[0] <= 4


def test_every_kept_mean_times_its_scale_is_the_mean_of_the_vectors():
    """``kept_mean``: the vector times the scale is the float64 mean of the explicit vectors for every accumulator
    (the reference engine's default, a small or a model-sized SumTrace, pooled or not); a model-sized deferred sum
    read ``alone`` is formed in its first row's storage (one model-sized buffer less at a prompt's peak)."""
    rng = np.random.default_rng(8)
    passes = [[[0.5, 0.0, -1.25], [0.0, 2.0, 0.75]]]
    for like, pooled, alone in [
        ([torch.zeros((4, 3)), torch.zeros(7)], False, False),
        ([torch.zeros((4, 3)), torch.zeros(7)], True, True),
        ([torch.zeros((1 << 10, 1 << 9)), torch.zeros(1 << 19)], True, False),
        ([torch.zeros((1 << 10, 1 << 9)), torch.zeros(1 << 19)], False, True),
    ]:
        rows = _rows(rng, like, 3)
        expected = _explicit(rows, passes)
        welford, stats = WelfordTrace(like), SumTrace(like, BufferPool() if pooled else None)
        for vector in expected:
            welford.update(_as_params(vector, [p.shape for p in like]))
        gram = gram64(rows)
        stats.add_pass(torch.tensor(passes[0]), rows, gram, torch.zeros(3, dtype=torch.float64), 0.0, defer=True)
        for accumulator in (welford, stats):
            vector, scale = accumulator.kept_mean(alone)
            kept = torch.cat([t.reshape(-1) for t in vector]).double().numpy() * scale
            np.testing.assert_allclose(kept, expected.mean(0), rtol=0, atol=1e-6)
        if alone and len(like[0]) > 4:
            assert vector[0].data_ptr() == rows[0][0].data_ptr()


def test_a_model_sized_sum_that_stays_zero_has_a_zero_mean_square():
    """A model-sized prompt whose every coefficient is 0 (all rewards equal to V, the oracle's x = 0) never forms its
    running sum: ||mean||^2 is exactly 0, so its squared bias is 0."""
    like = [torch.zeros(1 << 20)]
    rows = [[torch.ones(1 << 20)], [torch.full((1 << 20,), -2.0)]]
    for defer in (False, True):
        stats = SumTrace(like)
        gram = gram64(rows)
        stats.add_pass(torch.zeros((3, 2)), rows, gram, torch.zeros(2, dtype=torch.float64), 0.0, defer=defer)
        assert stats.sums is None and stats.mean_square() == 0.0 and stats.trace() == 0.0
