"""The count sketch: exact expectations and variances over every sign pattern, its fold against a plain loop, and
its sketch against the explicit matrix S."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_mse.gradients import sketch as sk
from grpo_mse.gradients.sketch import CountSketch, SketchSpec, block_variance, fold


def _vector(shapes, seed):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes]


def _flat(vector):
    return torch.cat([t.reshape(-1) for t in vector])


def _with_signs(sketch, flat_signs):
    """The same sketch with the given sign of every coordinate."""
    sketch.signs = [flat_signs[o : o + len(s)].to(torch.int8) for s, o in zip(sketch.signs, sketch.offsets)]
    return sketch


def _every_sign_pattern(shapes, spec, x, y):
    """Each block's estimate of <x, y> under every one of the 2^n sign patterns (equally likely)."""
    sketch = CountSketch(spec, [torch.zeros(shape) for shape in shapes])
    estimates = []
    for pattern in itertools.product((-1, 1), repeat=sketch.n):
        _with_signs(sketch, torch.tensor(pattern))
        estimates.append(sketch.block_dots(sketch.apply(x), sketch.apply(y)))
    return torch.tensor(estimates, dtype=torch.float64), sketch


def test_each_block_is_unbiased_with_the_stated_variance_and_the_blocks_are_uncorrelated_over_every_sign_pattern():
    shapes, spec = [(2,), (3,)], SketchSpec(dim=6, blocks=2)  # moduli 3 and 2: 3 x 2 > 5 coordinates
    x, y = _vector(shapes, 0), _vector(shapes, 1)
    estimates, sketch = _every_sign_pattern(shapes, spec, x, y)
    assert sketch.moduli == (3, 2) and spec.independent(sketch.n)
    exact = float(_flat(x) @ _flat(y))
    assert estimates.mean(0).tolist() == pytest.approx([exact, exact], rel=1e-12)
    variances = estimates.var(0, unbiased=False)
    for variance, m in zip(variances.tolist(), sketch.moduli):
        assert variance == pytest.approx(block_variance(_flat(x), _flat(y), m), rel=1e-10)
        assert variance > 0
    covariance = ((estimates[:, 0] - exact) * (estimates[:, 1] - exact)).mean()
    assert abs(float(covariance)) < 1e-12
    # the sketched inner product (here under the last pattern) is the mean of its blocks' estimates
    assert float(sketch.apply(x) @ sketch.apply(y)) == pytest.approx(float(estimates[-1].mean()), rel=1e-12)


def test_blocks_are_independent_up_to_as_many_coordinates_as_the_moduli_product():
    # moduli 3 and 2 over 6 coordinates: distances 1..5, none a multiple of 6, so no pair shares both buckets
    shapes, spec = [(3,), (3,)], SketchSpec(dim=6, blocks=2)
    x, y = _vector(shapes, 4), _vector(shapes, 5)
    estimates, sketch = _every_sign_pattern(shapes, spec, x, y)
    exact = float(_flat(x) @ _flat(y))
    covariance = float(((estimates[:, 0] - exact) * (estimates[:, 1] - exact)).mean())
    assert sketch.n == 6 and abs(covariance) < 1e-12 and spec.independent(6)
    assert not spec.independent(7)  # coordinates 0 and 6 would share both buckets (the next test)


def test_blocks_that_share_collisions_are_correlated_which_the_independence_check_says():
    shapes, spec = [(4,), (3,)], SketchSpec(dim=6, blocks=2)  # moduli 3 and 2: coordinates 0 and 6 collide in both
    x, y = _vector(shapes, 2), _vector(shapes, 3)
    estimates, sketch = _every_sign_pattern(shapes, spec, x, y)
    exact = float(_flat(x) @ _flat(y))
    covariance = float(((estimates[:, 0] - exact) * (estimates[:, 1] - exact)).mean())
    assert not spec.independent(sketch.n)
    flat_x, flat_y = _flat(x), _flat(y)
    assert covariance == pytest.approx(float(flat_x[0] * flat_y[6] + flat_x[6] * flat_y[0]) ** 2, rel=1e-10)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), m=st.integers(1, 9), data=st.data())
def test_fold_adds_each_value_into_its_bucket(n, m, data):
    phase = data.draw(st.integers(0, m - 1))
    values = torch.arange(1, n + 1, dtype=torch.float32) * 0.5
    out = torch.zeros(m, dtype=torch.float64)
    fold(values, phase, out)
    expected = torch.zeros(m, dtype=torch.float64)
    for k, value in enumerate(values.tolist()):
        expected[(phase + k) % m] += value
    assert torch.equal(out, expected)


def test_apply_is_the_explicit_sketch_matrix_times_the_flat_vector_across_chunk_and_parameter_boundaries(monkeypatch):
    monkeypatch.setattr(sk, "CHUNK", 7)  # chunks that end inside parameters and inside buckets
    shapes = [(3, 5), (11,), (2, 2, 3), (1,)]
    spec = SketchSpec(dim=40, blocks=3, seed=5)
    sketch = CountSketch(spec, [torch.zeros(s) for s in shapes])
    signs = torch.cat(sketch.signs).double()
    rows = []
    for m in sketch.moduli:
        matrix = torch.zeros((m, sketch.n), dtype=torch.float64)
        matrix[torch.arange(sketch.n) % m, torch.arange(sketch.n)] = signs
        rows.append(matrix)
    dense = torch.cat(rows) / len(sketch.moduli) ** 0.5
    x = [t.float() for t in _vector(shapes, 4)]
    assert torch.allclose(sketch.apply(x), dense @ _flat(x).double(), rtol=0, atol=1e-12)
    assert sketch.dim == sum(sketch.moduli) == dense.shape[0]


def test_moduli_are_the_largest_distinct_primes_within_each_blocks_share_and_a_seed_fixes_the_signs():
    spec = SketchSpec(dim=1 << 20, blocks=4)
    moduli = spec.moduli()
    assert len(set(moduli)) == 4 and all(sk.is_prime(m) and m <= (1 << 18) for m in moduli)
    assert [m for m in range(moduli[-1], (1 << 18) + 1) if sk.is_prime(m)] == sorted(moduli)
    assert spec.independent(7 * 10**9)  # a 7B model: no two coordinates share two buckets
    shapes = [torch.zeros(50), torch.zeros(4, 4)]
    same = [CountSketch(SketchSpec(64, 2, seed=3), shapes).signs for _ in range(2)]
    other = CountSketch(SketchSpec(64, 2, seed=4), shapes).signs
    assert all(torch.equal(a, b) for a, b in zip(*same))
    assert not all(torch.equal(a, b) for a, b in zip(same[0], other))
    assert set(torch.cat(same[0]).tolist()) == {-1, 1}


@pytest.mark.parametrize("dim, blocks", [(8, 1), (3, 2)])
def test_a_sketch_that_cannot_measure_its_own_error_is_refused(dim, blocks):
    with pytest.raises(ValueError, match="block"):
        SketchSpec(dim=dim, blocks=blocks)


def test_each_blocks_estimate_is_the_inner_product_of_its_own_rows_with_more_than_two_blocks():
    """block_dots with 3 blocks (4 by default): block r's estimate is <S_r x, S_r y>, S_r its explicit m_r x n
    matrix; a slice misplaced from the third block on goes unseen with 2 (found by mutation testing, issue 58)."""
    shapes = [(6,), (2, 4)]
    sketch = CountSketch(SketchSpec(dim=30, blocks=3, seed=2), [torch.zeros(s) for s in shapes])
    assert sketch.moduli == (7, 5, 3)
    signs, columns = torch.cat(sketch.signs).double(), torch.arange(sketch.n)
    x, y = _flat(_vector(shapes, 5)), _flat(_vector(shapes, 6))
    by_hand = []
    for m in sketch.moduli:
        matrix = torch.zeros((m, sketch.n), dtype=torch.float64)
        matrix[columns % m, columns] = signs
        by_hand.append(float((matrix @ x) @ (matrix @ y)))
    estimates = sketch.block_dots(sketch.apply([x[:6], x[6:].view(2, 4)]), sketch.apply([y[:6], y[6:].view(2, 4)]))
    assert estimates == pytest.approx(by_hand, rel=1e-12)


def test_the_sketch_is_made_on_the_vectors_device():
    """The blocks live on the vector's (the parameters') device: meta tensors stand in for an accelerator here."""
    spec = SketchSpec(dim=30, blocks=3)
    meta = CountSketch(spec, [torch.zeros(5, device="meta")])
    assert meta.apply([torch.ones(5, device="meta")]).device.type == "meta"
    leaf = torch.zeros(5, device="meta", requires_grad=True)
    assert sk.sketched_gradient((2 * leaf).sum(), [leaf], meta, retain=False).device.type == "meta"
    empty = CountSketch(spec, []).apply([])  # no parameters: the zero vector, on the CPU
    assert empty.device.type == "cpu" and torch.equal(empty, torch.zeros(15, dtype=torch.float64))


def test_sketched_gradient_fills_no_other_gradient_and_can_keep_the_graph():
    """d <p, o> / dp = o: the sketch of o. Only ``params`` are differentiated (o, a leaf that needs a gradient too,
    gets none), each gradient is dropped once sketched, and ``retain`` keeps the graph for a second pass."""
    generator = torch.Generator().manual_seed(8)
    param = torch.randn(9, dtype=torch.float64, generator=generator).requires_grad_()
    other = torch.randn(9, dtype=torch.float64, generator=generator).requires_grad_()
    sketch = CountSketch(SketchSpec(dim=30, blocks=3, seed=1), [param])
    output = (param * other).sum()
    first = sk.sketched_gradient(output, [param], sketch, retain=True)
    assert other.grad is None and param.grad is None
    second = sk.sketched_gradient(output, [param], sketch, retain=False)  # the graph is still there
    expected = sketch.apply([other.detach()])
    assert torch.allclose(first, expected, rtol=0, atol=1e-12) and torch.equal(first, second)


def test_is_prime_against_trial_division_by_every_smaller_number():
    by_hand = [n for n in range(200) if n >= 2 and all(n % d for d in range(2, n))]
    assert [n for n in range(200) if sk.is_prime(n)] == by_hand


def test_signs_are_one_byte_each_and_go_where_asked():
    """One int8 sign per coordinate is the sketch's only model-sized memory (n bytes, not 8 n); the signs go to
    ``device`` when given, else to each parameter's (meta tensors stand in for an accelerator)."""
    spec = SketchSpec(dim=30, blocks=3)
    on_cpu = CountSketch(spec, [torch.zeros(4), torch.zeros(3)])
    assert all(s.dtype == torch.int8 for s in on_cpu.signs)
    assert CountSketch(spec, [torch.zeros(4)], device="meta").signs[0].device.type == "meta"
    assert CountSketch(spec, [torch.zeros(4, device="meta")]).signs[0].device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_vector_is_sketched_as_its_float32_copy(dtype):
    """A sign flip is exact, so a 16-bit gradient's sketch is that of the same numbers in float32."""
    shapes = [(3, 5), (4,)]
    sketch = CountSketch(SketchSpec(dim=30, blocks=3, seed=4), [torch.zeros(s) for s in shapes])
    half = [t.to(dtype) for t in _vector(shapes, 9)]
    assert torch.equal(sketch.apply(half), sketch.apply([t.float() for t in half]))
