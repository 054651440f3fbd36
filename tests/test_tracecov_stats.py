import numpy as np
import pytest
import torch

from grpo_mse.tracecov import SumTrace, WelfordTrace, dot64


def _as_params(flat: np.ndarray, shapes) -> list[torch.Tensor]:
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(torch.tensor(flat[start:start + size], dtype=torch.float32).reshape(shape))
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
        np.testing.assert_allclose(torch.cat([t.reshape(-1) for t in sums.mean()]).numpy(),
                                   samples.mean(0), rtol=1e-5, atol=1e-5)
    assert sums.nbytes() * 2 == welford.nbytes()


def test_linear_combination_update_equals_explicit_vector():
    rng = np.random.default_rng(1)
    a = [torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32)]
    s = [torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32)]
    gram = [[dot64(a, a), dot64(a, s)], [dot64(s, a), dot64(s, s)]]
    combined, explicit = SumTrace(a), SumTrace(a)
    for c1, c0 in [(1.0, -0.3), (2.0, 0.5), (-1.5, 0.0)]:
        combined.add_combination([c1, c0], [a, s], gram)
        explicit.update([c1 * a[0] + c0 * s[0]])
    assert np.isclose(combined.trace(), explicit.trace(), rtol=1e-6)
    assert np.isclose(combined.sum_sq, explicit.sum_sq, rtol=1e-6)


def test_dot64_matches_float64_dot_products():
    """Blocked float64 dots equal exact float64 dot products (sizes around the block size)."""
    gen = torch.Generator().manual_seed(3)
    left = [torch.randn(*shape, generator=gen) for shape in [(10_000,), (3, 4096), (7,), (64, 65)]]
    right = [x + 1e-3 * torch.randn(x.shape, generator=gen) for x in left]
    exact = sum(float(torch.dot(a.reshape(-1).double(), b.reshape(-1).double())) for a, b in zip(left, right))
    assert dot64(left, right) == pytest.approx(exact, rel=1e-12)
    assert dot64(left, right, block=100) == pytest.approx(exact, rel=1e-12)
    assert dot64(left, [-x for x in right]) == pytest.approx(-exact, rel=1e-12)
