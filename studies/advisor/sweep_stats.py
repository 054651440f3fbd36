"""Statistics of a training sweep over K (numpy on per-run metrics): Welch intervals of a difference of means,
Spearman's rank correlation, the advisor's predicted budgeted error c1 K + c2 + c3/(K - 1), and the bootstrap of
the best K (seeds resampled within each K). The k-validation summaries (studies.advisor.k_validation) use them.
"""

from __future__ import annotations

import math

import numpy as np

from grpo_mse.analysis import bootstrap, error_model
from grpo_mse.tables.outputs import t975


def welch_interval(a, b) -> tuple[float, float]:
    """95% Welch interval of mean(a) - mean(b)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = a.mean() - b.mean()
    se2 = va + vb
    if se2 == 0:
        return diff, diff
    df = se2**2 / ((va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0))
    half = t975(max(1, int(math.floor(df)))) * math.sqrt(se2)
    return diff - half, diff + half


def ranks(values) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    values = np.asarray(values, float)
    order = np.argsort(values, kind="mergesort")
    out = np.empty(len(values))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[order[j + 1]] == values[order[i]]:
            j += 1
        out[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x, y) -> float:
    """Spearman's rank correlation (Pearson's on average ranks); nan if either side is constant or not finite, or
    with fewer than 3 pairs (two points always give +-1: no evidence)."""
    if len(x) < 3 or not (np.isfinite(np.asarray(x, float)).all() and np.isfinite(np.asarray(y, float)).all()):
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def predicted_error(prediction: dict, k: int) -> float:
    """c1 K + c2 + c3/(K - 1): N times the exact budgeted error of the GRPO step; nan when a constant is
    undefined, infinite or saved as text."""
    try:
        c1, c2, c3 = (bootstrap.number(prediction.get(c)) for c in ("c1", "c2", "c3"))
    except (TypeError, ValueError):
        return math.nan
    if not all(map(math.isfinite, (c1, c2, c3))):
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):  # K = 1: no GRPO error (nan)
        value = float(error_model.exact_error(c1, c2, c3, k, budget=1.0))
    return value if math.isfinite(value) else math.nan


def best_k_draws(runs, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """The best K (largest mean metric over seeds) in ``n_boot`` replicates that resample seeds within each K."""
    rng = np.random.default_rng(seed)
    ks = sorted(int(k) for k in runs["K"].unique())
    values = [runs.loc[runs["K"] == k, "value"].to_numpy(float) for k in ks]
    means = np.stack([v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1) for v in values], axis=1)
    return np.asarray(ks)[means.argmax(axis=1)]


def best_k_shares(draws) -> dict[str, float]:
    """{"K": share of replicates in which K is best}, every K that is best at least once."""
    ks, counts = np.unique(draws, return_counts=True)
    return {str(int(k)): float(c / len(draws)) for k, c in zip(ks, counts)}
