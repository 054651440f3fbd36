"""Exact theory on real prompts whose continuation is ONE generated token (top_p 1): the space is the vocabulary.

Per prompt x the pipeline with ``--max_new_tokens 1 --top_p 1`` samples y ~ softmax(logits / T) over the vocabulary
(an EOS is a continuation too, decoded as "", reward 0), and the reward is the last-integer rule on the decoded
token. ``theory.one_token_enumeration`` gives p, G, Q and g exactly, so every estimator's per-prompt tr Cov, bias^2
and MSE, and the Theorem-7 constants c1, c2, c3 of the prompt set, are finite sums (``theory``).
"""

from __future__ import annotations

import numpy as np

from grpo_mse.analysis import theory
from grpo_mse.gradients import estimators as est
from grpo_mse.policy.sampling import decode
from grpo_mse.rewards.rules import last_integer_reward
from grpo_mse.tables.inputs import prompt_ids
from grpo_mse.tables.records import OracleValues

# Estimator MSE, tr Cov and bias^2 are means over prompts of these per-prompt quantities.
QUANTITIES = ("mse", "trace_cov", "bias2")
MOMENTS = ("V", "g_sq", "vanilla_m2", "sigma_o2", "var_zeta2", "mean_score_sq")


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
    return OracleValues.exact(value, "exact one-token enumeration", settings).merged_into(row)


def prompt_curves(enum: theory.OneTokenEnumeration, k_list, names) -> dict:
    """{quantity: {name: [value at each K]}} for one prompt: exact MSE, tr Cov and bias^2 of each estimator."""
    out = {q: {n: [] for n in names} for q in QUANTITIES}
    for k in k_list:
        for name in names:
            exact = enum.estimator(k, name)
            for q in QUANTITIES:
                out[q][name].append(float(exact[q]))
    return out


def prompt_summary(row: dict, enum: theory.OneTokenEnumeration, k_list, names) -> dict:
    """One prompt's id, gold, exact moments (V, ||g||^2, E||Gs||^2, sigma_O^2, tr Var zeta_2) and curves."""
    moments = enum.moments()
    out = {
        "id": row.get("id"),
        "ground_truth": row["ground_truth"],
        **{m: float(moments[m]) for m in MOMENTS},
        **prompt_curves(enum, k_list, names),
    }
    if est.GRPO_STD in names and 0.0 < moments["V"] < 1.0:
        out["grpo_std_own_target"] = own_target_curves(enum, k_list)
    return out


def own_target_curves(enum: theory.OneTokenEnumeration, k_list) -> dict:
    """Std-GRPO against its own target g / sqrt(V (1 - V)): {"bias2": [...], "mse": [...]} per K (exact)."""
    value = float(enum.p @ enum.G)
    target = enum.p * enum.G / np.sqrt(value * (1.0 - value))
    out = {"bias2": [], "mse": []}
    for k in k_list:
        exact = enum.estimator(k, est.GRPO_STD)
        bias2 = theory.quad(exact["mean_coef"] - target, enum.Q)
        out["bias2"].append(bias2)
        out["mse"].append(float(exact["trace_cov"]) + bias2)
    return out


def mean_own_target(prompts: list[dict]) -> dict | None:
    """Mean over the prompts with 0 < V < 1 of ``own_target_curves`` (None without grpo_std)."""
    own = [p["grpo_std_own_target"] for p in prompts if "grpo_std_own_target" in p]
    if not own:
        return None
    return {q: np.mean([o[q] for o in own], axis=0).tolist() for q in ("bias2", "mse")} | {"n_prompts": len(own)}


def mean_curves(prompts: list[dict], names) -> dict:
    """{quantity: {name: [mean over prompts at each K]}}."""
    return {q: {n: np.mean([p[q][n] for p in prompts], axis=0).tolist() for n in names} for q in QUANTITIES}


def constants(prompts: list[dict], g_gram) -> dict:
    """Exact c1 = mean ||g(x) - mean g||^2, c2 = mean sigma_O^2, c3 = 2 mean tr Var zeta_2, K* over these prompts."""
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
            values.append(spread["c1"] * len(index) / (len(index) - 1))
    return float(np.mean(values)) if values else float("nan")


def theory_summary(prompts: list[dict], g_gram, k_list, names, config: dict) -> dict:
    """The theory JSON: K_list, mean exact MSE / tr Cov / bias^2 per estimator, constants, per-prompt values."""
    return {
        "K_list": list(k_list),
        **mean_curves(prompts, names),
        "scaling_constants": constants(prompts, g_gram),
        "grpo_std_own_target": mean_own_target(prompts),
        "g_gram": np.asarray(g_gram, dtype=np.float64).tolist(),
        "n_prompts": len(prompts),
        "mean_V": float(np.mean([p["V"] for p in prompts])),
        "per_prompt": prompts,
        "config": config,
        "note": (
            "Exact values for one generated token (run_tracecov.py --max_new_tokens 1 --top_p 1 at the same "
            "temperature): mse/trace_cov/bias2 = mean over prompts of each estimator's exact E||X - g||^2, "
            "tr Cov X and ||E X - g||^2 (the run's conditional_on_x is trace_cov). scaling_constants: c1 = "
            "mean ||g(x) - mean g||^2 over these prompts, c2 = mean sigma_O^2, c3 = 2 mean tr Var zeta_2, "
            "K* = sqrt(c3/c1)."
        ),
    }


DEFAULT_ESTIMATORS = list(est.ALL)
