"""Exact theory on real prompts whose continuation is ONE generated token (top_p 1): the space is the vocabulary.

Per prompt x the pipeline with ``--max_new_tokens 1 --top_p 1`` samples y ~ softmax(logits / T) over the vocabulary
(an EOS is a continuation too, decoded as "", reward 0), and the reward is the last-integer rule on the decoded
token. ``theory.one_token_enumeration`` gives p, G, Q and g exactly, so every estimator's per-prompt tr Cov, bias^2
and MSE, and the Theorem-7 constants c1, c2, c3 of the prompt set, are finite sums (``theory``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from grpo_mse.gradients import estimators as est
from grpo_mse.policy.sampling import decode
from grpo_mse.rewards.rules import last_integer_reward
from grpo_mse.tables.inputs import prompt_ids
from grpo_mse.tables.records import OracleValues, SavedRecord
from studies.exact import theory

# Estimator MSE, tr Cov and bias^2 are means over prompts of these per-prompt quantities.
QUANTITIES = ("mse", "trace_cov", "bias2")
MOMENTS = ("V", "g_sq", "vanilla_m2", "sigma_o2", "var_zeta2", "mean_score_sq")


@dataclass(frozen=True, kw_only=True)
class Curves(SavedRecord):
    """Exact MSE, tr Cov and bias^2 of each estimator at each K ({name: [value at each K]}), of one prompt
    (``prompt_curves``) or their means over prompts (``mean_curves``)."""

    mse: dict[str, list[float]]  # E||X - g||^2
    trace_cov: dict[str, list[float]]  # tr Cov X
    bias2: dict[str, list[float]]  # ||E X - g||^2


@dataclass(frozen=True, kw_only=True)
class OwnTarget(SavedRecord):
    """Std-GRPO against its own target g / sqrt(V (1 - V)) at each K, exactly (``own_target_curves``), or the
    mean over the prompts with 0 < V < 1 (``mean_own_target``, with their count)."""

    bias2: list[float]  # ||E X - g / sqrt(V (1 - V))||^2
    mse: list[float]  # tr Cov X + bias2
    n_prompts: int | None = None  # the prompts averaged (means only)


@dataclass(frozen=True, kw_only=True)
class PromptTheory(SavedRecord):
    """One prompt of the theory JSON's ``per_prompt`` (``prompt_summary``): its exact moments and curves."""

    id: object  # the dataset row's id
    ground_truth: object  # its gold answer
    V: float  # P(reward 1)
    g_sq: float  # ||g||^2
    vanilla_m2: float  # E||G s||^2
    sigma_o2: float  # sigma_O^2 = E||(G - V) s||^2 - ||g||^2
    var_zeta2: float  # tr Var zeta_2
    mean_score_sq: float  # ||E s||^2 (0 for the sampled law's score)
    mse: dict[str, list[float]]  # per estimator, the exact MSE at each K
    trace_cov: dict[str, list[float]]  # per estimator, tr Cov at each K
    bias2: dict[str, list[float]]  # per estimator, bias^2 at each K
    grpo_std_own_target: OwnTarget | None = None  # with grpo_std and 0 < V < 1

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> PromptTheory:
        """The prompt of a saved ``per_prompt`` entry."""
        found = super().from_json(data, where)
        own = found.grpo_std_own_target
        return replace(found, grpo_std_own_target=None if own is None else OwnTarget.from_json(own, where))


@dataclass(frozen=True, kw_only=True)
class TheorySummary(SavedRecord):
    """The exact-theory JSON of scripts/exact_theory.py (``theory_summary``)."""

    K_list: list[int]  # the group sizes
    mse: dict[str, list[float]]  # per estimator, the mean over prompts of the exact MSE at each K
    trace_cov: dict[str, list[float]]  # the same for tr Cov
    bias2: dict[str, list[float]]  # the same for bias^2
    scaling_constants: theory.ScalingConstants  # c1, c2, c3 and K* of these prompts
    grpo_std_own_target: OwnTarget | None  # std-GRPO against its own target, mean over 0 < V < 1 (null: none)
    g_gram: list[list[float]]  # Gram matrix <g(x_i), g(x_j)> of the prompts' true gradients
    n_prompts: int
    mean_V: float  # mean V over the prompts
    per_prompt: list[PromptTheory]
    config: dict  # the command's settings, the model fingerprint and the matching run flags
    note: str

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> TheorySummary:
        """The summary of a saved theory JSON."""
        found = super().from_json(data, where)
        own = found.grpo_std_own_target
        return replace(
            found,
            scaling_constants=theory.ScalingConstants.from_json(found.scaling_constants, where),
            grpo_std_own_target=None if own is None else OwnTarget.from_json(own, where),
            per_prompt=[PromptTheory.from_json(p, where) for p in found.per_prompt],
        )


def token_texts(tokenizer, vocab_size: int) -> list[str]:
    """Decoded text of each one-token continuation y = 0..vocab-1, as the pipeline decodes a sample."""
    return decode(tokenizer, [[token] for token in range(vocab_size)])


def token_rewards(texts: list[str], gold) -> np.ndarray:
    """G_y = 1[last integer of text(y) == gold] for every token y.

    The exact tools enumerate the built-in arithmetic data, which has no data_source: its rule is
    rewards.DEFAULT_SOURCE's, the last integer, taken here directly because only the gold is at hand.
    """
    return np.array([last_integer_reward(text, gold) for text in texts], dtype=np.float64)


def reachable(texts: list[str], gold) -> bool:
    """True when some single token earns reward 1 (else V = 0 and every gradient is exactly 0)."""
    return bool(token_rewards(texts, gold).any())


def jacobian_bytes(model) -> int:
    """Memory of the fp32 logit Jacobian [vocab, trainable params] that the enumeration holds."""
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return 4 * int(model.config.vocab_size) * params


def enumerate_row(
    model,
    tokenizer,
    row: dict,
    texts: list[str],
    temperature: float,
    top_p: float = 1.0,
    score_distribution: str = "model",
) -> theory.OneTokenEnumeration:
    """p, G, Q, g of the row's one-token continuation space at ``temperature`` / ``top_p`` (theory)."""
    rewards = token_rewards(texts, row["ground_truth"])
    return theory.one_token_enumeration(
        model, prompt_ids(tokenizer, row["prompt"]), lambda y: rewards[y], temperature, top_p, score_distribution
    )


def oracle_record(row: dict, value: float, settings: dict | None = None) -> dict:
    """A calculate_oracle_v.py line with the exact V: n_oracle/correct_count null, interval [V, V]."""
    exact = OracleValues(value, None, None, value, value, "exact one-token enumeration", settings or None)
    return exact.merged_into(row)


def prompt_curves(enum: theory.OneTokenEnumeration, k_list, names) -> Curves:
    """Exact MSE, tr Cov and bias^2 of each estimator at each K for one prompt."""
    out = {q: {n: [] for n in names} for q in QUANTITIES}
    for k in k_list:
        for name in names:
            exact = enum.estimator(k, name)
            for q in QUANTITIES:
                out[q][name].append(float(getattr(exact, q)))
    return Curves(**out)


def prompt_summary(row: dict, enum: theory.OneTokenEnumeration, k_list, names) -> PromptTheory:
    """One prompt's id, gold, exact moments (V, ||g||^2, E||Gs||^2, sigma_O^2, tr Var zeta_2) and curves."""
    moments = enum.moments()
    own = own_target_curves(enum, k_list) if est.GRPO_STD in names and 0.0 < moments.V < 1.0 else None
    return PromptTheory(
        id=row.get("id"),
        ground_truth=row["ground_truth"],
        **{m: float(getattr(moments, m)) for m in MOMENTS},
        **prompt_curves(enum, k_list, names).to_json(),
        grpo_std_own_target=own,
    )


def own_target_curves(enum: theory.OneTokenEnumeration, k_list) -> OwnTarget:
    """Std-GRPO against its own target g / sqrt(V (1 - V)): bias^2 and MSE per K (exact)."""
    value = float(enum.p @ enum.G)
    target = enum.p * enum.G / np.sqrt(value * (1.0 - value))
    out = {"bias2": [], "mse": []}
    for k in k_list:
        exact = enum.estimator(k, est.GRPO_STD)
        bias2 = theory.quad(exact.mean_coef - target, enum.Q)
        out["bias2"].append(bias2)
        out["mse"].append(float(exact.trace_cov) + bias2)
    return OwnTarget(**out)


def mean_own_target(prompts: list[dict]) -> OwnTarget | None:
    """Mean over the prompts with 0 < V < 1 of ``own_target_curves`` (None without grpo_std); ``prompts``: the saved
    per-prompt entries."""
    own = [p["grpo_std_own_target"] for p in prompts if "grpo_std_own_target" in p]
    if not own:
        return None
    means = {q: np.mean([o[q] for o in own], axis=0).tolist() for q in ("bias2", "mse")}
    return OwnTarget(**means, n_prompts=len(own))


def mean_curves(prompts: list[dict], names) -> Curves:
    """The mean over the prompts (saved per-prompt entries) of each estimator's curves."""
    return Curves(**{q: {n: np.mean([p[q][n] for p in prompts], axis=0).tolist() for n in names} for q in QUANTITIES})


def constants(prompts: list[dict], g_gram) -> theory.ScalingConstants:
    """Exact c1 = mean ||g(x) - mean g||^2, c2 = mean sigma_O^2, c3 = 2 mean tr Var zeta_2, K* over these prompts
    (``prompts``: the saved per-prompt entries)."""
    return theory.scaling_constants(g_gram, [p["sigma_o2"] for p in prompts], [p["var_zeta2"] for p in prompts])


def batch_c1_target(g_gram, batch_size: int) -> float:
    """E[advisor c1 | these prompts] = mean over batches b of sum_{i in b} ||g_i - mean_b g||^2 / (|b| - 1).

    The advisor's per-batch c1 is unbiased for E_X ||g(X) - E g||^2 when prompts are drawn at random; with the
    prompts held fixed its expectation is the (n - 1)-denominator spread of each batch, i.e. n / (n - 1) times
    ``theory.scaling_constants`` c1 of the batch. Batches are consecutive prompts (one process's
    ``rank_batches``); a batch of one prompt gives no c1 and is skipped, as in the run.
    """
    gram = np.asarray(g_gram, dtype=np.float64)
    count, values = gram.shape[0], []
    for start in range(0, count, batch_size):
        index = np.arange(start, min(start + batch_size, count))
        if len(index) >= 2:
            spread = theory.scaling_constants(gram[np.ix_(index, index)], np.zeros(len(index)), np.zeros(len(index)))
            values.append(spread.c1 * len(index) / (len(index) - 1))
    return float(np.mean(values)) if values else float("nan")


def theory_summary(prompts: list[PromptTheory], g_gram, k_list, names, config: dict) -> TheorySummary:
    """The theory JSON: K_list, mean exact MSE / tr Cov / bias^2 per estimator, constants, per-prompt values."""
    saved = [p.to_json() for p in prompts]
    return TheorySummary(
        K_list=list(k_list),
        **mean_curves(saved, names).to_json(),
        scaling_constants=constants(saved, g_gram),
        grpo_std_own_target=mean_own_target(saved),
        g_gram=np.asarray(g_gram, dtype=np.float64).tolist(),
        n_prompts=len(prompts),
        mean_V=float(np.mean([p.V for p in prompts])),
        per_prompt=list(prompts),
        config=config,
        note=(
            "Exact values for one generated token (run_tracecov.py --max_new_tokens 1 --top_p 1 at the same "
            "temperature): mse/trace_cov/bias2 = mean over prompts of each estimator's exact E||X - g||^2, "
            "tr Cov X and ||E X - g||^2 (the run's conditional_on_x is trace_cov). scaling_constants: c1 = "
            "mean ||g(x) - mean g||^2 over these prompts, c2 = mean sigma_O^2, c3 = 2 mean tr Var zeta_2, "
            "K* = sqrt(c3/c1)."
        ),
    )


DEFAULT_ESTIMATORS = list(est.ALL)
