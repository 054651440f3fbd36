"""GPU readiness checked on CPU (issue 18), the maths on a device: Gram block plans by device, torchrun's
process-group arguments, sampled tokens kept in their recomputed nucleus, one backward per sequence."""

from __future__ import annotations

import pytest
import torch

from grpo_mse import distributed
from grpo_mse.errors import UsageError
from grpo_mse.gradients import statistics
from grpo_mse.policy.logprobs import FAR, token_log_probs
from grpo_mse.policy.sampling import nucleus_mask
from studies.benchmarks.bench_engines import blocks_per_gram
from studies.benchmarks.qwen_shapes import qwen2_5_config

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
    """Qwen2.5-0.5B's parameter sizes (meta tensors: no memory): >= 2^24 coordinates per block on CUDA; on the
    CPU cache-sized blocks for the 5 vectors of a one-group pass (a, s and 3 running sums): a float64 buffer of
    at most 4 MiB, >= 2^14 coordinates a block (a few thousand blocks: per-block overhead well under the
    copies' time), and built-in-policy-sized vectors (<= 2^20 coordinates) in one block as before."""
    transformers = pytest.importorskip("transformers")
    config = qwen2_5_config("0.5B")
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(config)
    sizes = [p.numel() for p in model.parameters()]
    assert 490e6 < sum(sizes) < 500e6
    cuda = statistics.block_plan(sizes, statistics.block_coordinates(5, "cuda"))
    cpu = statistics.block_plan(sizes, statistics.block_coordinates(5, "cpu"))
    assert statistics.block_coordinates(5, "cuda") >= 1 << 24 and len(cuda) <= 30
    width = statistics.block_coordinates(5, "cpu", sum(sizes))
    assert 1 << 14 <= width and 5 * width * 8 <= 4 << 20 and len(cpu) <= 7000
    assert statistics.block_coordinates(5, "cpu", 1 << 20) >= 1 << 20  # small models: one block


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gram64_exact_with_device_blocks(dtype):
    generator = torch.Generator().manual_seed(3)
    shapes = [(7, 5), (3,), (11, 2), (1,)]
    vectors = [[torch.randn(s, generator=generator).to(dtype) for s in shapes] for _ in range(4)]
    flat = torch.stack([torch.cat([t.double().reshape(-1) for t in v]) for v in vectors])
    for block in (None, 1, 6, 13, 1000):
        torch.testing.assert_close(statistics.gram64(vectors, block), flat @ flat.T, rtol=1e-13, atol=1e-13)
    assert blocks_per_gram(vectors, 13) == -(-flat.shape[1] // 13)


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
        with pytest.raises(UsageError, match="GRPO_DIST_TIMEOUT_MIN"):
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


# ---------------------------------------------------------------- one group per pass (large models)


def test_reward_split_sends_each_sequence_through_one_backward(random_lm, monkeypatch):
    """With one group per pass and binary rewards, a and s come from one forward and one backward pass per
    reward value over its own continuations (each sequence once), and the traces equal the reference's."""
    from grpo_mse.gradients import engine
    from grpo_mse.gradients import estimators as est
    from grpo_mse.gradients.trace_engines import EngineSettings
    from grpo_mse.gradients.trace_engines import fast as fast_engine
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
    real_grad = fast_engine.gradient
    monkeypatch.setattr(fast_engine, "gradient", lambda *a, **kw: grads.append(1) or real_grad(*a, **kw))
    fast = engine.prompt_traces(
        logprob_fn, params, groups, rewards, 0.4, est.ALL, EngineSettings("fast", groups_per_pass=1)
    )
    expected = [
        len({tuple(c) for c, r in zip(group, row.tolist()) if r == value})
        for group, row in zip(groups, rewards)
        for value in sorted(set(row.tolist()))
    ]
    assert seen == expected and len(grads) == 6  # per group: each reward value's own continuations, once
    monkeypatch.setattr(fast_engine, "gradient", real_grad)
    batched = engine.prompt_traces(
        logprob_fn, params, groups, rewards, 0.4, est.ALL, EngineSettings("fast", groups_per_pass=3)
    )
    reference = engine.prompt_traces(logprob_fn, params, groups, rewards, 0.4, est.ALL, EngineSettings("reference"))
    for name in est.ALL:
        assert fast.traces[name] == pytest.approx(reference.traces[name], rel=1e-5, abs=1e-12)
        assert fast.traces[name] == pytest.approx(batched.traces[name], rel=1e-5, abs=1e-12)
    for name in fast.bias2:
        assert fast.bias2[name] == pytest.approx(reference.bias2[name], rel=1e-4, abs=1e-10)
