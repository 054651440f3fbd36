import itertools
import os

import pytest
import torch
from matplotlib.colors import is_color_like

from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.trace_engines.fast import affine_coefficients


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
    assert torch.allclose(
        est.oracle_weights(batch, torch.tensor([0.5, 0.1], dtype=torch.float64)),
        torch.tensor([[0.25, -0.25], [-0.05, -0.05]], dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="needs V_oracle"):
        est.weights("oracleV", rewards)
    with pytest.raises(ValueError, match="unknown estimator"):
        est.weights("ppo", rewards)


def test_oracle_baseline_keeps_the_rewards_precision_and_batch_shape():
    # A float V made a float32 tensor would shift a float64 run's weights by about 1e-8 (0.3 is not a float32).
    rewards = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    assert torch.equal(est.oracle_weights(rewards, 0.3), (rewards - 0.3) / 3)
    assert est.oracle_weights(rewards.float(), 0.3).dtype == torch.float32
    # One V per group, with groups over two batch dimensions: V[a, b] belongs to rewards[a, b, :].
    rewards = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) % 2
    value = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], dtype=torch.float64)
    assert torch.equal(est.oracle_weights(rewards, value), (rewards - value[..., None]) / 4)


def test_std_grpo_own_target_scale_is_one_over_the_reward_sd():
    # g / sqrt(V (1 - V)): the target std-GRPO estimates, over g (Appendix A); the sd of a Bernoulli(V) reward.
    for value, scale in ((0.5, 2.0), (0.2, 2.5), (0.9, 1 / 0.3)):
        assert est.std_own_target_scale(value) == pytest.approx(scale, rel=1e-12)


def test_every_estimator_is_affine_in_rewards_within_a_group():
    for k in (2, 3, 5):
        for pattern in itertools.product([0.0, 1.0], repeat=k):
            rewards = torch.tensor(pattern, dtype=torch.float64)
            for name in est.ALL:
                w = est.weights(name, rewards, 0.3)
                reward_coef, score_coef = affine_coefficients(w, rewards)
                assert torch.allclose(k * w, reward_coef * rewards + score_coef)


def test_non_affine_weights_are_rejected():
    rewards = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="not affine"):
        affine_coefficients(rewards**2 / 3, rewards)


def _explicit_weights(name: str, group: list[float], value: float) -> list[float]:
    """Each estimator's weights written out element by element (plain Python, no tensor code shared)."""
    k = len(group)
    mean = sum(group) / k
    sd = (sum((g - mean) ** 2 for g in group) / (k - 1)) ** 0.5
    per_sample = {
        "naive": lambda g: g / k,
        "grpo": lambda g: (g - (k * mean - g) / (k - 1)) / k,
        "oracleV": lambda g: (g - value) / k,
        "grpo_std": lambda g: (g - mean) / (sd + 1e-6) / k,
        "drgrpo": lambda g: (g - mean) / k,
    }
    return [per_sample[name](g) for g in group]


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("name", est.ALL)
def test_registry_weights_equal_explicit_formulas_on_random_rewards(name, k):
    gen = torch.Generator().manual_seed(k)
    rewards = torch.cat(
        [torch.randn(5, k, generator=gen, dtype=torch.float64), torch.randint(0, 2, (5, k), generator=gen).double()]
    )
    values = torch.rand(10, generator=gen, dtype=torch.float64)
    got = est.weights(name, rewards, values)
    want = [_explicit_weights(name, row.tolist(), float(v)) for row, v in zip(rewards, values)]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        est.REGISTRY[name].weights(*([rewards, values] if est.REGISTRY[name].needs_value else [rewards])),
        got,
        rtol=0,
        atol=0,
    )


def test_registry_facts_and_derived_tuples():
    assert est.ALL == ("naive", "grpo", "oracleV", "grpo_std", "drgrpo")  # JSON keys of the original
    assert est.UNBIASED == ("naive", "grpo", "oracleV") and est.BIASED == ("grpo_std", "drgrpo")
    assert [n for n in est.ALL if est.REGISTRY[n].needs_value] == ["oracleV"]
    assert est.REGISTRY["naive"].label == "vanilla"
    labels = [e.label for e in est.REGISTRY.values()]
    colors = [e.color for e in est.REGISTRY.values()]
    assert all(labels) and len(set(labels)) == len(labels) and len(set(colors)) == len(colors)
    assert all(is_color_like(c) for c in colors)
    assert all(e.name == name and e.trainer and e.weights.__doc__ for name, e in est.REGISTRY.items())
    assert all(e.closed_form is None or e.closed_form.__doc__ for e in est.REGISTRY.values())


def test_docs_page_lists_every_estimator():
    with open(
        os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "docs", "estimators.md"),
        encoding="utf-8",
    ) as handle:
        page = handle.read()
    for name, entry in est.REGISTRY.items():
        assert f"`{name}`" in page and entry.label in page, name
