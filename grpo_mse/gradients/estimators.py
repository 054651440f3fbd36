"""Policy-gradient estimators of grad E[G] as per-sample weights on the scores grad log pi(y_k|x), and their registry.

Every estimator of a group of K samples is ``sum_k w_k * grad lp_k``: the weight functions below return
``w`` (shape ``[..., K]``) from the rewards ``G`` (and the oracle value ``V``). ``REGISTRY`` holds one
``Estimator`` per JSON key (weights, bias, exact closed-form MSE, label, colour, matching trainer setting, and
the own target a run also measures it against); every other module reads these facts from it. Torch is imported
lazily, so figures can read labels without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# The registry's keys (the names in result JSON/CSV files and on --estimators, kept as the original has them:
# the vanilla estimator is "naive" there); other modules use these constants, named after the estimator.
VANILLA, GRPO, ORACLE, GRPO_STD, DRGRPO = "naive", "grpo", "oracleV", "grpo_std", "drgrpo"

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


# Exact MSEs from the moments m of ``studies.exact.theory.exact_moments`` (an ``ExactMoments``; E[s] = 0, K >= 2).


def vanilla_exact_mse(m, K: int) -> float:
    """MSE_vanilla = (E||G s||^2 - ||g||^2) / K."""
    return (m.vanilla_m2 - m.g_sq) / K


def grpo_exact_mse(m, K: int) -> float:
    """MSE_GRPO = [4 (K - 2) zeta1 + 2 zeta_h] / (K (K - 1)) (U-statistic of order 2)."""
    return (4.0 * (K - 2) * m.zeta1 + 2.0 * m.zeta_h) / (K * (K - 1))


def oracle_exact_mse(m, K: int) -> float:
    """MSE_oracle = sigma_O^2 / K."""
    return m.sigma_o2 / K


def drgrpo_exact_mse(m, K: int) -> float:
    """MSE_DrGRPO = ((K - 1) / K)^2 MSE_GRPO + ||g||^2 / K^2 (tr Cov shrunk, plus the bias ||g / K||^2)."""
    return ((K - 1) / K) ** 2 * grpo_exact_mse(m, K) + m.g_sq / K**2


def std_own_target_scale(value: float) -> float:
    """1 / sqrt(V (1 - V)), 0 < V < 1: std-GRPO's own target g / sqrt(V (1 - V)) over g (Appendix A)."""
    return (value * (1.0 - value)) ** -0.5


@dataclass(frozen=True)
class OwnTarget:
    """The per-prompt target scale(V) g (0 < V < 1) a biased estimator is also measured against: a run records its
    bias^2 and MSE against it (``bias2_own``, ``mse_own``) and the paired summary ``<name>_own_target``."""

    scale: Callable[[float], float]  # V -> the target over g
    note: str  # the paired summary's note on the target


@dataclass(frozen=True)
class Estimator:
    """One registry entry: X = sum_k w_k grad lp_k with w = ``weights(G)`` or ``weights(G, V)``."""

    name: str  # the key in result JSON/CSV files and on --estimators
    label: str  # display name in figures, tables and printouts
    color: str  # matplotlib colour in every figure
    weights: Callable  # rewards [..., K] (and V when needs_value) -> weights [..., K]
    biased: bool  # E X != grad E[G]
    needs_value: bool  # the weights use the oracle value V(x)
    closed_form: Callable[[object, int], float] | None  # (exact moments, K) -> exact MSE; None: by conditioning only
    trainer: str  # the VERL / TRL setting whose advantage gives the same gradient
    own_target: OwnTarget | None = None  # also measured against this per-prompt target; None: against g only


REGISTRY: dict[str, Estimator] = {
    e.name: e
    for e in (
        Estimator(
            VANILLA,
            "vanilla",
            "tab:blue",
            vanilla_weights,
            biased=False,
            needs_value=False,
            closed_form=vanilla_exact_mse,
            trainer="none (no baseline)",
        ),
        Estimator(
            GRPO,
            "GRPO",
            "tab:orange",
            grpo_weights,
            biased=False,
            needs_value=False,
            closed_form=grpo_exact_mse,
            trainer="VERL adv_estimator=rloo (exactly); = K/(K-1) x VERL grpo with norm_adv_by_std_in_grpo=False",
        ),
        Estimator(
            ORACLE,
            "oracle baseline",
            "tab:green",
            oracle_weights,
            biased=False,
            needs_value=True,
            closed_form=oracle_exact_mse,
            trainer="none (needs the true V(x); a learned critic approximates it)",
        ),
        Estimator(
            GRPO_STD,
            "GRPO (std-normalised)",
            "tab:red",
            grpo_std_weights,
            biased=True,
            needs_value=False,
            closed_form=None,
            trainer='VERL adv_estimator=grpo (default), TRL scale_rewards="group" (default)',
            own_target=OwnTarget(
                std_own_target_scale,
                "MSE against g(x)/sqrt(V(1-V)), the gradient of E[2 arcsin sqrt(V)]; prompts with V in (0, 1) only",
            ),
        ),
        Estimator(
            DRGRPO,
            "Dr.GRPO",
            "tab:purple",
            drgrpo_weights,
            biased=True,
            needs_value=False,
            closed_form=drgrpo_exact_mse,
            trainer='VERL grpo with norm_adv_by_std_in_grpo=False, TRL scale_rewards="none"',
        ),
    )
}
ALL = tuple(REGISTRY)
UNBIASED = tuple(name for name, e in REGISTRY.items() if not e.biased)
BIASED = tuple(name for name, e in REGISTRY.items() if e.biased)


def own_targets(names) -> list[str]:
    """The estimators among ``names`` (registry keys) that a run also measures against their own target, in order."""
    return [name for name in names if name in REGISTRY and REGISTRY[name].own_target is not None]


def get(name: str) -> Estimator:
    """The registry entry called ``name``; ValueError naming the choices otherwise."""
    if name not in REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; choose from {', '.join(ALL)}")
    return REGISTRY[name]


def weights(name: str, rewards: torch.Tensor, value=None) -> torch.Tensor:
    """Weights of the estimator called ``name`` (one of ``ALL``); ``value`` is V(x), used by oracleV only."""
    entry = get(name)
    if not entry.needs_value:
        return entry.weights(rewards)
    if value is None:
        raise ValueError(f"the {name} estimator needs V_oracle")
    return entry.weights(rewards, value)
