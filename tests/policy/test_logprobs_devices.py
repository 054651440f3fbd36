"""The log-probability paths keep every tensor on the model's device (CUDA refuses a CPU tensor beside a GPU one):
each path runs a model on the meta device under the emulated device rule (tests/device_rule.py, docs/gpu.md)."""

import pytest
import torch
from device_rule import GPU, DeviceRule, MixedDevices, TinyMetaLM

from grpo_mse.policy.logprobs import (
    cached_prompt_logprobs,
    packed_prompt_logprobs,
    sequence_logprobs,
    shared_prompt_logprobs,
    token_log_probs,
)

PROMPT = [3, 1, 4]
CONTINUATIONS = [[5, 9, 2, 6], [5, 3], [8, 9, 7]]  # unequal lengths: padding and masks are exercised
PATHS = [sequence_logprobs, shared_prompt_logprobs, packed_prompt_logprobs, cached_prompt_logprobs]


def scores(path, model, top_p=1.0):
    return path(model, PROMPT, CONTINUATIONS, eos_ids=[6], pad_id=0, include_eos=False, top_p=top_p)


def test_the_rule_refuses_what_cuda_refuses_and_allows_what_it_allows():
    gpu, host_index = torch.zeros((2, 5), device=GPU), torch.tensor([[1], [0]])
    with DeviceRule():
        with pytest.raises(MixedDevices):
            gpu.gather(-1, host_index)  # meta alone accepts this one
        with pytest.raises(MixedDevices):
            torch.nn.functional.embedding(host_index, gpu)
        with pytest.raises(MixedDevices):
            gpu[torch.tensor([0])] = torch.ones((1, 5))  # a CPU value into a GPU tensor
        assert gpu[host_index[:, 0]].shape == (2, 5)  # a CPU index is moved by CUDA
        assert (gpu * torch.tensor(2.0)).device == GPU  # a 0-dim CPU tensor is a scalar
        with pytest.raises(MixedDevices):
            torch.tensor(2.0).add_(gpu.sum())  # ... read, never written
        assert gpu.gather(-1, host_index.to(GPU)).shape == (2, 1)
        host = gpu.to("cpu", copy=True)
    assert host.device.type == "cpu" and host.shape == (2, 5)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_tiny_model_is_a_faithful_model_on_the_cpu(attention):
    """On the CPU the fake's paths agree with one another, so its masks and positions mean what HF's do."""
    torch.manual_seed(0)
    model = TinyMetaLM(attention, device="cpu")
    reference = scores(sequence_logprobs, model)
    for path in PATHS[1:]:
        torch.testing.assert_close(scores(path, model), reference)
    other = TinyMetaLM(attention, device="cpu")
    assert not torch.allclose(scores(sequence_logprobs, other), reference)  # it depends on its weights


@pytest.mark.parametrize("top_p", [1.0, 0.9])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.__name__)
def test_every_path_stays_on_the_model_device(path, attention, top_p):
    model = TinyMetaLM(attention)
    with DeviceRule():
        lp = scores(path, model, top_p)
    assert lp.device == GPU and lp.shape == (len(CONTINUATIONS),)


def test_nucleus_targets_from_the_host_join_the_device_mask():
    logits, targets = torch.zeros((2, 3, 7), device=GPU), torch.tensor([[1, 2, 3], [4, 5, 6]])
    with DeviceRule():
        logp = token_log_probs(logits, 1.0, top_p=0.5, targets=targets)
    assert logp.device == GPU and logp.shape == (2, 3, 7)
