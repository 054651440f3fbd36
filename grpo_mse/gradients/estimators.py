"""Policy-gradient estimators of grad E[G] as per-sample weights on the scores grad log pi(y_k|x).

Every estimator of a group of K samples is ``sum_k w_k * grad lp_k``: the functions below return
the weights ``w`` (shape ``[..., K]``) from the rewards ``G`` (and the oracle value ``V``).
Unbiased: vanilla, grpo (= leave-one-out), oracle. Biased: grpo_std (VERL/TRL default), drgrpo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where used, so that the names above load fast (flag choices)
    import torch

UNBIASED = ("naive", "grpo", "oracleV")
BIASED = ("grpo_std", "drgrpo")
ALL = UNBIASED + BIASED
STD_EPS = 1e-6  # the epsilon VERL adds to the group standard deviation


def vanilla_weights(rewards: torch.Tensor) -> torch.Tensor:
    """Vanilla REINFORCE: w_k = G_k / K."""
    return rewards / rewards.shape[-1]


def grpo_weights(rewards: torch.Tensor) -> torch.Tensor:
    """GRPO without std: w_k = (1/K) * K/(K-1) * (G_k - mean(G)) = (G_k - mean(G)) / (K-1).

    Equal to the leave-one-out baseline: (1/K) * (G_k - mean_{j != k} G_j).
    """
    k = rewards.shape[-1]
    return (rewards - rewards.mean(-1, keepdim=True)) / (k - 1)


def oracle_weights(rewards: torch.Tensor, value: torch.Tensor | float) -> torch.Tensor:
    """Oracle baseline: w_k = (G_k - V(x)) / K."""
    import torch

    value = torch.as_tensor(value, dtype=rewards.dtype, device=rewards.device)
    if value.dim() == rewards.dim() - 1 and value.dim() > 0:
        value = value.unsqueeze(-1)
    return (rewards - value) / rewards.shape[-1]


def grpo_std_weights(rewards: torch.Tensor, eps: float = STD_EPS) -> torch.Tensor:
    """Std-normalised GRPO (VERL ``grpo``, TRL default): w_k = (G_k - mean) / (std_unbiased + eps) / K."""
    k = rewards.shape[-1]
    centred = rewards - rewards.mean(-1, keepdim=True)
    return centred / (rewards.std(-1, keepdim=True, unbiased=True) + eps) / k


def drgrpo_weights(rewards: torch.Tensor) -> torch.Tensor:
    """Dr.GRPO: w_k = (G_k - mean(G)) / K, i.e. GRPO without the K/(K-1) factor (biased by (K-1)/K)."""
    return (rewards - rewards.mean(-1, keepdim=True)) / rewards.shape[-1]


def weights(name: str, rewards: torch.Tensor, value=None) -> torch.Tensor:
    """Weights of the estimator called ``name`` (one of ``ALL``)."""
    if name == "naive":
        return vanilla_weights(rewards)
    if name == "grpo":
        return grpo_weights(rewards)
    if name == "oracleV":
        if value is None:
            raise ValueError("the oracleV estimator needs V_oracle")
        return oracle_weights(rewards, value)
    if name == "grpo_std":
        return grpo_std_weights(rewards)
    if name == "drgrpo":
        return drgrpo_weights(rewards)
    raise ValueError(f"unknown estimator {name!r}; choose from {', '.join(ALL)}")
