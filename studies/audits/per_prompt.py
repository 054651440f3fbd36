"""A tracecov run's per-prompt CSV (``*_per_prompt.csv``) as MSE arrays, and the ratio of mean MSEs pooled over K.

The pooled ratio of estimators a / b over the run's group sizes is the geometric mean of the per-K ratios of mean
MSEs, exp((1/n_K) sum_K ln(mean_a,K / mean_b,K)): one number per pair that the pre-registered powered runs test
against 1 (results/real_llm/qwen_coder_05b/powered/README.md). Its interval resamples prompts once for all K (a
prompt's MSEs at different K are measured on the same prompt), percentile, at the level asked."""

from __future__ import annotations

import numpy as np

from grpo_mse.errors import UsageError


def mse_table(path: str) -> dict[int, dict[str, np.ndarray]]:
    """{K: {estimator: per-prompt MSE in prompt order}} from a per-prompt CSV."""
    import pandas as pd

    frame = pd.read_csv(path)
    missing = {"prompt_index", "K", "estimator", "mse"} - set(frame.columns)
    if missing:
        raise UsageError(f"--per_prompt {path}: no column {', '.join(sorted(missing))}; give a *_per_prompt.csv")
    table = {}
    for k, rows in frame.groupby("K"):
        wide = rows.pivot(index="prompt_index", columns="estimator", values="mse").sort_index()
        table[int(k)] = {name: wide[name].to_numpy(float) for name in wide.columns}
    return table


def pooled_ratio(
    table: dict[int, dict[str, np.ndarray]], top: str, bottom: str, resamples: int, seed: int, levels=(0.95,)
) -> dict:
    """The pooled ratio of ``top`` over ``bottom`` (module doc) with a percentile interval per level in ``levels``
    (resampled ratios with a mean MSE <= 0 at some K are undefined and left out; their count is returned)."""
    ks = sorted(table)
    counts = {len(table[k][top]) for k in ks} | {len(table[k][bottom]) for k in ks}
    if len(counts) != 1:
        raise UsageError("the per-prompt CSV has different prompts at different K; a pooled ratio needs the same")
    (n,) = counts
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))

    def pooled(rows) -> np.ndarray:
        logs = []
        for k in ks:
            a, b = table[k][top][rows].mean(axis=-1), table[k][bottom][rows].mean(axis=-1)
            with np.errstate(invalid="ignore", divide="ignore"):
                logs.append(np.where((a > 0) & (b > 0), np.log(a) - np.log(b), np.nan))
        return np.exp(np.mean(logs, axis=0))

    estimate = float(pooled(np.arange(n)))
    draws = pooled(picks)
    defined = draws[np.isfinite(draws)]
    intervals = {
        f"{level:g}": [float(v) for v in np.quantile(defined, [(1 - level) / 2, (1 + level) / 2])] for level in levels
    }
    return {
        "ratio": f"{top}/{bottom}",
        "K_list": ks,
        "estimate": estimate,
        "intervals": intervals,
        "undefined_replicates": int(len(draws) - len(defined)),
        "prompts": n,
    }


def per_k_ratios(
    table: dict[int, dict[str, np.ndarray]], top: str, bottom: str, seed: int, n_boot: int = 2000, levels=(0.95,)
) -> list[dict]:
    """Per K, the ratio of mean MSEs of ``top`` over ``bottom`` with the run's own studentized log-scale interval
    (``paired.run_statistics``: ``n_boot`` prompt-bootstrap replicates drawn with the run's ``seed``) at each level in
    ``levels``, the same replicates for every level and K (a Bonferroni interval beside the run's 95% one)."""
    from grpo_mse.analysis import bootstrap

    ks = sorted(table)
    weights = bootstrap.prompt_weights(len(table[ks[0]][top]), n_boot, seed)
    out = []
    for k in ks:
        ratio, se = bootstrap.ratio_of_means(weights, table[k][top], table[k][bottom])
        intervals = {
            f"{level:g}": bootstrap.studentized_interval(ratio, se, weights, level, log=True) for level in levels
        }
        out.append({"K": k, "estimate": float(ratio[0]), "intervals": intervals})
    return out
