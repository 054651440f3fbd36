"""The power of a training validation of the group-size advisor (scripts/power_analysis.py; the test is
docs/k_validation_protocol.md's): the advisor's relative budgeted errors, the power of the 4-cell interaction
contrast (and its check against simulated experiments), the seeds it needs, the calibration of the seed SD and of
the metric per unit of relative error from committed sweeps, and the K* map's settings and contrasts.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from grpo_mse.errors import require
from grpo_mse.tables.records import SavedRecord


@dataclass(frozen=True, kw_only=True)
class SweepCalibration(SavedRecord):
    """The seed SD and the metric's slope on relative error from committed sweeps (``calibration``)."""

    seed_sd: float  # pooled within-cell standard deviation over seeds
    seed_sd_dof: int  # its degrees of freedom
    beta: float  # within-setting slope of the cell means on the relative budgeted error
    beta_ci95: list[float]  # t interval of the slope (fixed effects per setting)


@dataclass(frozen=True, kw_only=True)
class Contrast(SavedRecord):
    """The two settings and two K with the largest advisor-implied interaction (``best_contrast``)."""

    settings: list[str]  # the two settings
    K: list[int]  # the two group sizes
    relative_contrast: float  # D_rel = (r_a(K1) - r_a(K2)) - (r_b(K1) - r_b(K2))


def relative_errors(c1: float, c2: float, c3: float, ks) -> np.ndarray:
    """r(K) = E(K) / min E over ``ks``, E(K) = c1 K + c2 + c3/(K - 1) (N x the budgeted error; N cancels)."""
    ks = np.asarray(ks, dtype=np.float64)
    errors = c1 * ks + c2 + c3 / (ks - 1)
    return errors / errors.min()


def contrast_power(effect: float, sigma: float, n: int, alpha: float) -> float:
    """Power of the two-sided t test of a 4-cell interaction contrast (n seeds per cell, df 4(n - 1))."""
    from scipy import stats

    df = 4 * (n - 1)
    ncp = abs(effect) / (sigma * math.sqrt(4.0 / n))
    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))


def seeds_for_power(effect: float, sigma: float, alpha: float, power: float = 0.8, cap: int = 10**7) -> int | None:
    """Smallest n >= 2 with ``contrast_power`` >= ``power`` (bisection; power rises with n); None when the
    effect is 0 or needs more than ``cap`` seeds."""
    if not effect or contrast_power(effect, sigma, cap, alpha) < power:
        return None
    low, high = 1, 2
    while contrast_power(effect, sigma, high, alpha) < power:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if contrast_power(effect, sigma, mid, alpha) < power else (low, mid)
    return high


def simulated_power(effect: float, sigma: float, n: int, alpha: float, runs: int, seed: int = 0) -> float:
    """Share of ``runs`` simulated experiments (normal metric, 4 cells of n seeds, cell means 0 except D in one)
    whose pooled-variance t test of the contrast rejects at ``alpha`` (two-sided): checks ``contrast_power``."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    cells = rng.normal(0.0, sigma, size=(runs, 4, n))
    cells[:, 0] += effect
    means, variances = cells.mean(2), cells.var(2, ddof=1)
    estimate = means[:, 0] - means[:, 1] - means[:, 2] + means[:, 3]
    t = estimate / np.sqrt(variances.mean(1) * 4.0 / n)
    return float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, 4 * (n - 1))))


def calibration(sweeps: dict) -> SweepCalibration:
    """Pooled within-cell seed SD and the within-setting slope beta of metric on relative error (centred per
    setting), from {name: (cells, relative errors at sorted K)}."""
    squares, dof, xs, ys = 0.0, 0, [], []
    for cells, relative in sweeps.values():
        ks = sorted(cells)
        means = np.array([cells[k].mean() for k in ks])
        for k in ks:
            squares += float(((cells[k] - cells[k].mean()) ** 2).sum())
            dof += len(cells[k]) - 1
        xs.append(relative - relative.mean())
        ys.append(means - means.mean())
    from scipy import stats

    x, y = np.concatenate(xs), np.concatenate(ys)
    beta = float(x @ y / (x @ x))
    free = len(x) - 1 - len(xs)  # one slope and one mean per setting
    half = (
        stats.t.ppf(0.975, free) * math.sqrt(float(((y - beta * x) ** 2).sum()) / free / (x @ x))
        if free > 0
        else math.nan
    )
    return SweepCalibration(
        seed_sd=math.sqrt(squares / dof),
        seed_sd_dof=dof,
        beta=beta,
        beta_ci95=[beta - half, beta + half],  # t interval of the slope of the cell means (fixed effects)
    )


def map_settings(k_map: dict, base: str) -> list[dict]:
    """The K* map's settings with c1, c2, c3 (c2 from the entry, else from its run's group_size_advisor)."""
    settings = k_map.get("settings")
    require(isinstance(settings, list) and len(settings) >= 2, "the K* map has fewer than two settings")
    runs = k_map.get("runs") or [None] * len(settings)
    out = []
    for entry, run in zip(settings, runs):
        c2 = entry.get("c2")
        if c2 is None and run:
            path = run if os.path.exists(run) else os.path.join(base, run)
            require(os.path.exists(path), f"the K* map's run {run} is missing (c2 is read from it)")
            with open(path, encoding="utf-8") as handle:
                c2 = json.load(handle)["group_size_advisor"]["pooled"]["c2"]
        values = [entry.get("c1"), c2, entry.get("c3")]
        require(
            all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values),
            f"setting {entry.get('setting')!r}: c1, c2, c3 must be positive numbers (got {values})",
        )
        out.append({"setting": entry.get("setting"), "c": values, "K_star_ci95": entry.get("K_star_ci95")})
    return out


def best_contrast(settings: list[dict], ks: list[int]) -> Contrast | None:
    """The two settings and two K with the largest advisor-implied interaction |D_rel| (fixed before any sweep)."""
    best = None
    for a, b in itertools.combinations(settings, 2):
        ra, rb = relative_errors(*a["c"], ks), relative_errors(*b["c"], ks)
        for i, j in itertools.combinations(range(len(ks)), 2):
            value = (ra[i] - ra[j]) - (rb[i] - rb[j])
            if best is None or abs(value) > abs(best.relative_contrast):
                best = Contrast(settings=[a["setting"], b["setting"]], K=[ks[i], ks[j]], relative_contrast=value)
    return best


def separated_pairs(settings: list[dict], ratio: float = 3.0) -> list:
    """Pairs of settings whose K* differ by ``ratio`` or more with non-overlapping 95% intervals."""
    pairs = []
    for a, b in itertools.combinations(settings, 2):
        ia, ib = a["K_star_ci95"], b["K_star_ci95"]
        if not (ia and ib) or any(isinstance(v, str) for v in (*ia, *ib)):
            continue
        low, high = sorted([a, b], key=lambda s: 1 + math.sqrt(s["c"][2] / s["c"][0]))
        star = [1 + math.sqrt(s["c"][2] / s["c"][0]) for s in (low, high)]
        if star[1] / star[0] >= ratio and low["K_star_ci95"][1] < high["K_star_ci95"][0]:
            pairs.append([low["setting"], high["setting"]])
    return pairs
