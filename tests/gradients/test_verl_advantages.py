"""The project's estimator weights against VERL's own GRPO and RLOO advantages (verl 0.9.1).

With K samples per prompt and our GRPO weight w_k = (G_k - mean(G)) / (K - 1):
K * w_k = A_rloo = K/(K-1) * A_grpo_unnormalised, and K * grpo_std_weights = A_grpo (std-normalised).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_mse.gradients.estimators import drgrpo_weights, grpo_std_weights, grpo_weights

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")


def verl_advantage(fn, rewards: torch.Tensor, **kwargs) -> torch.Tensor:
    """VERL outcome advantage for rewards [B, K], read back as [B, K]."""
    b, k = rewards.shape
    length = 5
    lengths = torch.randint(1, length + 1, (b * k,), generator=torch.Generator().manual_seed(1))
    response_mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    token_rewards = torch.zeros(b * k, length, dtype=rewards.dtype)
    token_rewards[torch.arange(b * k), lengths - 1] = rewards.reshape(-1)  # outcome reward on the last token
    index = np.repeat(np.array([f"prompt-{i}" for i in range(b)], dtype=object), k)
    advantages, _ = fn(token_level_rewards=token_rewards, response_mask=response_mask, index=index, **kwargs)
    first_token = advantages[:, 0]  # every valid token carries the sequence advantage
    assert torch.allclose(advantages, first_token[:, None] * response_mask)
    return first_token.reshape(b, k)


def random_rewards(k: int, binary: bool, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    shape = (6, k)
    if binary:
        rewards = torch.bernoulli(torch.full(shape, 0.4, dtype=torch.float64), generator=gen)
        rewards[0] = 1.0  # an all-correct group: zero advantage in every estimator
        return rewards
    return torch.randn(shape, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("k", [2, 3, 8, 16])
@pytest.mark.parametrize("binary", [True, False])
def test_grpo_weights_equal_verl_rloo_and_scaled_grpo(k, binary):
    rewards = random_rewards(k, binary, seed=k)
    ours = k * grpo_weights(rewards)
    rloo = verl_advantage(core_algos.compute_rloo_outcome_advantage, rewards)
    grpo_unnorm = verl_advantage(core_algos.compute_grpo_outcome_advantage, rewards, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(ours, rloo, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours, k / (k - 1) * grpo_unnorm, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(k * drgrpo_weights(rewards), grpo_unnorm, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [2, 4, 16])
@pytest.mark.parametrize("binary", [True, False])
def test_grpo_std_weights_equal_verl_normalised_grpo(k, binary):
    rewards = random_rewards(k, binary, seed=100 + k)
    grpo = verl_advantage(core_algos.compute_grpo_outcome_advantage, rewards, norm_adv_by_std_in_grpo=True)
    torch.testing.assert_close(k * grpo_std_weights(rewards), grpo, rtol=1e-8, atol=1e-10)


def test_registered_estimator_names():
    """The launcher's algorithm.adv_estimator=grpo resolves to the function compared above."""
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage
    assert core_algos.get_adv_estimator_fn("rloo") is core_algos.compute_rloo_outcome_advantage
