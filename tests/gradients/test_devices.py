"""The gradient statistics keep vectors on their device and send to the host what the plan puts there: vectors on
the meta device stand for a GPU's under the emulated device rule (tests/device_rule.py, docs/gpu.md)."""

import torch
from device_rule import GPU, DeviceRule

from grpo_mse.gradients.estimators import oracle_weights
from grpo_mse.gradients.statistics import (
    CUDA_BLOCK,
    BetweenPromptBatch,
    block_coordinates,
    gram64,
    spill_to_file,
)

SHAPES = [(3, 2), (5,)]


def gpu_vector():
    return [torch.zeros(shape, device=GPU) for shape in SHAPES]


def test_a_per_group_value_from_the_host_meets_rewards_on_the_device():
    rewards = torch.zeros((2, 4), device=GPU)
    with DeviceRule():
        per_group = oracle_weights(rewards, torch.tensor([0.25, 0.5]))
        scalar = oracle_weights(rewards, 0.5)
    assert per_group.device == GPU and per_group.shape == (2, 4)
    assert scalar.device == GPU and scalar.shape == (2, 4)


def test_cuda_gets_large_blocks_and_other_devices_cache_sized_ones():
    """The CUDA branch needs no GPU: the device is only named."""
    for cuda in (torch.device("cuda"), "cuda:1"):
        assert block_coordinates(8, cuda) == CUDA_BLOCK
        assert block_coordinates(8, cuda, total=1000) == CUDA_BLOCK
    assert block_coordinates(8, "cpu") < CUDA_BLOCK
    assert block_coordinates(8, GPU) == block_coordinates(8, "cpu")


def test_a_partial_gram_matrix_stays_on_the_device():
    with DeviceRule():
        full = gram64([gpu_vector() for _ in range(3)])
        partial = gram64([gpu_vector() for _ in range(4)], block=4, rows=2)
    assert full.device == GPU and full.shape == (3, 3)
    assert partial.device == GPU and partial.shape == (4, 4) and partial.dtype == torch.float64


def test_a_spilled_device_vector_comes_back_as_host_tensors(tmp_path):
    with DeviceRule():
        views = spill_to_file(gpu_vector(), str(tmp_path / "mean.bin"))
    assert [v.device.type for v in views] == ["cpu", "cpu"]
    assert [tuple(v.shape) for v in views] == SHAPES
    assert (tmp_path / "mean.bin").stat().st_size == 11 * 4


def test_c1_means_from_the_device_are_held_on_the_host():
    batch = BetweenPromptBatch()
    with DeviceRule():
        batch.add(gpu_vector(), 1.0, 2)
        batch.add(gpu_vector(), 2.0, 2, owned=True)
    assert [t.device.type for mean in batch.means for t in mean] == ["cpu"] * 4
    assert batch.result()["n"] == 2
