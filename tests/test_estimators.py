import itertools

import pytest
import torch

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.engine import affine_coefficients


def test_grpo_weights_equal_leave_one_out_baseline():
    torch.manual_seed(0)
    for k in (2, 3, 8):
        rewards = torch.randint(0, 2, (50, k)).double()
        loo = torch.stack([(rewards[:, i] - (rewards.sum(1) - rewards[:, i]) / (k - 1)) / k for i in range(k)], 1)
        assert torch.allclose(est.grpo_weights(rewards), loo)
        centred = rewards - rewards.mean(1, keepdim=True)
        assert torch.allclose(est.grpo_weights(rewards), centred / k * k / (k - 1))


def test_formulas_of_each_estimator():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    assert torch.allclose(est.vanilla_weights(rewards), rewards / 4)
    assert torch.allclose(est.oracle_weights(rewards, 0.25), (rewards - 0.25) / 4)
    assert torch.allclose(est.drgrpo_weights(rewards), (rewards - 0.5) / 4)
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std()
    assert torch.allclose(est.grpo_std_weights(rewards), (rewards - 0.5) / (std + est.STD_EPS) / 4)
    batch = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(est.oracle_weights(batch, torch.tensor([0.5, 0.1], dtype=torch.float64)),
                          torch.tensor([[0.25, -0.25], [-0.05, -0.05]], dtype=torch.float64))
    with pytest.raises(ValueError, match="needs V_oracle"):
        est.weights("oracleV", rewards)
    with pytest.raises(ValueError, match="unknown estimator"):
        est.weights("ppo", rewards)


def test_every_estimator_is_affine_in_rewards_within_a_group():
    for k in (2, 3, 5):
        for pattern in itertools.product([0.0, 1.0], repeat=k):
            rewards = torch.tensor(pattern, dtype=torch.float64)
            for name in est.ALL:
                w = est.weights(name, rewards, 0.3)
                c1, c0 = affine_coefficients(w, rewards)
                assert torch.allclose(k * w, c1 * rewards + c0)


def test_non_affine_weights_are_rejected():
    rewards = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="not affine"):
        affine_coefficients(rewards ** 2 / 3, rewards)
