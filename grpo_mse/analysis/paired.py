"""Paired comparisons of the estimators per K, all from one joint prompt bootstrap (``bootstrap``).

Every estimator is evaluated on the same samples of the same prompts, so ratios and differences of their
mean MSEs are paired: a replicate resamples prompts once and recomputes every statistic from them.
- ratio e/oracle = mean_x MSE_e(x) / mean_x MSE_oracle(x), difference e - oracle (MSE = tr Cov + bias^2);
- heavy tails: the share of the largest prompt in the sum over prompts, and the median of per-prompt ratios;
- ||E s||^2 per prompt (unbiased, from the group-mean scores): 0 when the score is that of the sampled law;
- oracle noise: the bias Var(V_hat) tr Cov(s_bar) that the estimated V adds to the oracle's trace;
- std-normalised GRPO against its own per-prompt target g / sqrt(V (1 - V)) (Appendix A).
"""

from __future__ import annotations

import sys

import numpy as np

from grpo_mse.analysis import bootstrap as bs
from grpo_mse.analysis.advisor import advise, column, prompt_columns, rounded

ORACLE = "oracleV"


def mse_of(record: dict, name: str) -> float:
    """The prompt's MSE of ``name``: tr Cov plus bias^2 for a biased estimator."""
    return record.get("mse", record["tr_cov"])[name]


def _series(values: list[np.ndarray], weights: np.ndarray) -> list[dict]:
    return [bs.summarise(v, weights) for v in values]


def largest_share(values: np.ndarray) -> float:
    """max_x v_x / sum_x v_x over the prompts (1/T when all are equal)."""
    values = values[np.isfinite(values)]
    total = values.sum()
    return float(values.max() / total) if len(values) and total > 0 else float("nan")


def paired_summary(records_by_k: dict[int, list[dict]], k_list, names, weights: np.ndarray) -> dict:
    """Per K: mean MSE per estimator, ratio / difference to the oracle, median per-prompt ratio, largest-prompt
    share, ||E s||^2, oracle noise and std-GRPO against its own target, each with a joint 95% interval."""
    _, position = prompt_columns({k: records_by_k[k] for k in k_list})
    out = {"K_list": list(k_list), "n_boot": bs.n_boot_of(weights), "mean": {}, "ratio": {}, "difference": {},
           "median_prompt_ratio": {}, "largest_prompt_share": {}}
    columns = {n: [column(records_by_k[k], position, lambda r, n=n: mse_of(r, n)) for k in k_list] for n in names}
    means = {n: [bs.weighted_mean(weights, c) for c in columns[n]] for n in names}
    for n in names:
        out["mean"][n] = _series(means[n], weights)
        out["largest_prompt_share"][n] = [largest_share(c) for c in columns[n]]
    if ORACLE in names:
        for n in names:
            if n == ORACLE:
                continue
            with np.errstate(invalid="ignore", divide="ignore"):
                out["ratio"][f"{n}/{ORACLE}"] = _series([a / b for a, b in zip(means[n], means[ORACLE])], weights)
                out["median_prompt_ratio"][f"{n}/{ORACLE}"] = _series(
                    [bs.weighted_median(weights, a / b) for a, b in zip(columns[n], columns[ORACLE])], weights)
            out["difference"][f"{n}-{ORACLE}"] = _series([a - b for a, b in zip(means[n], means[ORACLE])], weights)
    optional = {"mean_score_sq": lambda r: r.get("mean_score_sq", np.nan),
                "oracle_noise": lambda r: r.get("oracle_noise", np.nan)}
    for key, value_fn in optional.items():
        cols = [column(records_by_k[k], position, value_fn) for k in k_list]
        if any(np.isfinite(c).any() for c in cols):
            per_k = [bs.weighted_mean(weights, c) for c in cols]
            out[key] = _series(per_k, weights)
            with np.errstate(invalid="ignore"):
                out[f"{key}_mean_over_K"] = bs.summarise(np.mean(per_k, axis=0), weights)
            if key == "oracle_noise" and ORACLE in names:
                with np.errstate(invalid="ignore", divide="ignore"):
                    out["oracle_noise_relative"] = _series(
                        [bs.weighted_mean(weights, c) / m for c, m in zip(cols, means[ORACLE])], weights)
    own = {key: [column(records_by_k[k], position, lambda r, key=key: r.get(key, {}).get("grpo_std", np.nan))
                 for k in k_list] for key in ("mse_own", "bias2_own")}
    if "grpo_std" in names and any(np.isfinite(c).any() for c in own["mse_own"]):
        out["grpo_std_own_target"] = {
            "mse": _series([bs.weighted_mean(weights, c) for c in own["mse_own"]], weights),
            "bias2": _series([bs.weighted_mean(weights, c) for c in own["bias2_own"]], weights),
            "n_prompts": [int(np.isfinite(c).sum()) for c in own["mse_own"]],
            "note": "MSE against g(x)/sqrt(V(1-V)), the gradient of E[2 arcsin sqrt(V)]; prompts with V in (0, 1) only",
        }
    out["note"] = ("Joint prompt bootstrap (one resample of prompts per replicate, shared by every statistic and "
                   "by group_size_advisor); estimate = the data, ci95 = BCa 95% interval. ratio = ratio of "
                   "mean MSEs over prompts; median_prompt_ratio = median over prompts of per-prompt ratios; "
                   "largest_prompt_share = max_x MSE(x) / sum_x MSE(x).")
    return out


def run_statistics(records_by_k: dict[int, list[dict]], batches_by_k: dict[int, list[dict]], k_list, names,
                   seed: int = 0, n_boot: int = 2000, with_advisor: bool = True, budget: int = 1024,
                   allowed=None) -> dict:
    """{"paired": paired_summary, "group_size_advisor": advise} from ONE set of bootstrap replicates."""
    prompts, _ = prompt_columns({k: records_by_k[k] for k in k_list})
    weights = bs.prompt_weights(len(prompts), n_boot, seed)
    out = {"paired": paired_summary(records_by_k, k_list, names, weights)}
    if with_advisor and len(prompts) < 2:  # c1 and every interval need two prompts or more
        print("note: the group-size advisor needs 2 or more prompts (--T 2+); skipped", file=sys.stderr)
    elif with_advisor:
        out["group_size_advisor"] = advise(records_by_k, batches_by_k, budget=budget, allowed=allowed,
                                           weights=weights)
    return out


def _cell(label: str, summary: dict) -> str:
    if not summary["ci95"]:  # one prompt, or too many undefined replicates: no interval
        return f"{label}={rounded(summary['estimate'])} [n/a]"
    low, high = summary["ci95"]
    return f"{label}={rounded(summary['estimate'])} [{rounded(low)}, {rounded(high)}]"


def describe(paired: dict) -> str:
    """One line per K: paired ratios and differences to the oracle (and ||E s||^2) with 95% intervals."""
    lines = []
    for i, k in enumerate(paired["K_list"]):
        parts = [_cell(label, series[i]) for table in (paired["ratio"], paired["difference"])
                 for label, series in table.items()]
        if "mean_score_sq" in paired:
            parts.append(_cell("||E s||^2", paired["mean_score_sq"][i]))
        lines.append(f"K={k:4d}  " + "  ".join(parts))
    if "mean_score_sq_mean_over_K" in paired:
        lines.append(_cell("||E s||^2 (prompts with 0<V<1, mean over K)", paired["mean_score_sq_mean_over_K"]))
    return "\n".join(lines)
