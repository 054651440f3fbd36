"""Seeds per (setting, K) cell that a training validation of the group-size advisor needs (issue 27 item 5).

The test (docs/k_validation_protocol.md): per setting s and group size K the training metric's mean mu_s(K) over
n seeds; the advisor implies the interaction D = [mu_a(k1) - mu_a(k2)] - [mu_b(k1) - mu_b(k2)] for two settings.
- Implied effect: D = beta x ([r_a(k1) - r_a(k2)] - [r_b(k1) - r_b(k2)]), r_s(K) = E_s(K) / min_K E_s(K) the
  advisor's relative budgeted error (E = c1 K + c2 + c3/(K - 1)), beta the metric per unit of relative error,
  the within-setting least-squares slope over the committed sweeps (an assumption: the metric is linear in r).
- Power: the contrast of 4 cell means has s.e. sigma sqrt(4/n); a two-sided t test with 4(n - 1) degrees of
  freedom (sigma pooled over the cells) at level alpha/m (Holm's first step over m confirmatory tests) has power
  P(|T| > t_crit), T noncentral t with noncentrality D / (sigma sqrt(4/n)); n is the smallest with power >= 0.8.
- Cost: runs = n x settings x K list; core hours = runs x core-seconds per run / 3600.

  python scripts/power_analysis.py --k_map results/paper_regime/design2/k_map.json --out outputs/power_analysis.json
"""

import itertools
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json

SWEEPS = {  # the committed sweeps and predictions that give sigma and beta (same regime, 8 seeds x 4 K each)
    "train_mixed": (
        "results/k_validation/sweep_runs_train_mixed.csv",
        "results/k_validation/prediction_train_mixed.json",
    ),
    "train_mixed_t1.5": (
        "results/k_validation/sweep_runs_train_mixed_t1.5.csv",
        "results/k_validation/prediction_train_mixed_t1.5.json",
    ),
}
METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"
CORE_SECONDS_PER_RUN = 90.0  # committed train_mixed sweep: 32 runs in 24 min on 2 cores (docs/k_validation.md)


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


def sweep_cells(csv: str, prediction: dict) -> tuple[dict, np.ndarray]:
    """({K: per-seed metric values}, the advisor's relative errors at the sorted K) of one committed sweep."""
    from grpo_mse.training.runs_table import read_training, run_means

    runs = run_means(read_training(csv, METRIC), METRIC)
    cells = {int(k): group["value"].to_numpy() for k, group in runs.groupby("K")}
    return cells, relative_errors(*[float(prediction[c]) for c in ("c1", "c2", "c3")], sorted(cells))


def calibration(sweeps: dict) -> dict:
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
    return {
        "seed_sd": math.sqrt(squares / dof),
        "seed_sd_dof": dof,
        "beta": beta,
        "beta_ci95": [beta - half, beta + half],  # t interval of the slope of the cell means (fixed effects)
    }


def map_settings(k_map: dict, base: str) -> list[dict]:
    """The K* map's settings with c1, c2, c3 (c2 from the entry, else from its run's group_size_advisor)."""
    settings = k_map.get("settings")
    cli.require(isinstance(settings, list) and len(settings) >= 2, "the K* map has fewer than two settings")
    runs = k_map.get("runs") or [None] * len(settings)
    out = []
    for entry, run in zip(settings, runs):
        c2 = entry.get("c2")
        if c2 is None and run:
            path = run if os.path.exists(run) else os.path.join(base, run)
            cli.require(os.path.exists(path), f"the K* map's run {run} is missing (c2 is read from it)")
            with open(path, encoding="utf-8") as handle:
                c2 = json.load(handle)["group_size_advisor"]["pooled"]["c2"]
        values = [entry.get("c1"), c2, entry.get("c3")]
        cli.require(
            all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values),
            f"setting {entry.get('setting')!r}: c1, c2, c3 must be positive numbers (got {values})",
        )
        out.append({"setting": entry.get("setting"), "c": values, "K_star_ci95": entry.get("K_star_ci95")})
    return out


def best_contrast(settings: list[dict], ks: list[int]) -> dict:
    """The two settings and two K with the largest advisor-implied interaction |D_rel| (fixed before any sweep)."""
    best = None
    for a, b in itertools.combinations(settings, 2):
        ra, rb = relative_errors(*a["c"], ks), relative_errors(*b["c"], ks)
        for i, j in itertools.combinations(range(len(ks)), 2):
            value = (ra[i] - ra[j]) - (rb[i] - rb[j])
            if best is None or abs(value) > abs(best["relative_contrast"]):
                best = {"settings": [a["setting"], b["setting"]], "K": [ks[i], ks[j]], "relative_contrast": value}
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


def analysis(k_map_path: str, ks: list[int], alpha: float, tests: int, seconds: float, seed_sd: float | None) -> dict:
    """The power analysis: calibration, the K* map's largest implied contrast, seeds per cell, runs, core hours."""
    with open(k_map_path, encoding="utf-8") as handle:
        k_map = json.load(handle)
    settings = map_settings(k_map, os.getcwd())
    sweeps = {}
    for name, (csv, prediction_path) in SWEEPS.items():
        with open(prediction_path, encoding="utf-8") as handle:
            prediction = json.load(handle)
        sweeps[name] = sweep_cells(csv, prediction)
    fitted = calibration(sweeps)
    sigma = seed_sd if seed_sd is not None else fitted["seed_sd"]
    contrast = best_contrast(settings, ks)
    level = alpha / tests
    implied = fitted["beta"] * contrast["relative_contrast"]
    n = seeds_for_power(implied, sigma, level)
    observed = {  # the committed sweeps' own interaction at the contrast's K, for scale
        "K": contrast["K"],
        "value": float(
            np.subtract(*[sweeps["train_mixed"][0][k].mean() for k in contrast["K"]])
            - np.subtract(*[sweeps["train_mixed_t1.5"][0][k].mean() for k in contrast["K"]])
        ),
    }
    observed["seeds_per_cell"] = seeds_for_power(observed["value"], sigma, level)
    runs = None if n is None else n * 2 * len(ks)
    return {
        "k_map": k_map_path,
        "allowed_K": ks,
        "calibration": {**fitted, "sweeps": {name: list(paths) for name, paths in SWEEPS.items()}, "metric": METRIC},
        "seed_sd_used": sigma,
        "settings_with_Kstar_ratio_3_and_separate_intervals": separated_pairs(settings),
        "contrast": {**contrast, "implied_effect": implied},
        "alpha": alpha,
        "confirmatory_tests": tests,
        "test_level": level,
        "power": 0.8,
        "seeds_per_cell": n,
        "seeds_per_cell_at_beta_ci95": [  # the slope's uncertainty: the implied effect at each end of its interval
            seeds_for_power(b * contrast["relative_contrast"], sigma, level) for b in fitted["beta_ci95"]
        ],
        "observed_interaction": observed,
        "runs_for_two_settings_x_K_list": runs,
        "core_seconds_per_run": seconds,
        "core_hours": None if runs is None else runs * seconds / 3600,
        "wall_hours_on_2_cores": None if runs is None else runs * seconds / 3600 / 2,
        "note": __doc__.split("\n\n")[1],
    }


@dataclass(kw_only=True)
class PowerConfig(Flags):
    """The K* map to read, the test family, the cost of a run, and the output."""

    k_map: str = option(help="K* map JSON (scripts/k_map.py)")
    out: str = option(help="JSON file for the analysis")
    allowed_K: list[int] = option([2, 4, 8, 16], minimum=2, help="group sizes of the sweep (two or more)")
    alpha: float = option(0.05, help="family-wise level")
    tests: int = option(2, minimum=1, help="confirmatory tests (Holm)")
    core_seconds_per_run: float = option(CORE_SECONDS_PER_RUN, above=0, help="CPU core seconds of one training run")
    seed_sd: float | None = option(None, above=0, help="override the pooled SD of the sweeps")


def main(argv=None) -> None:
    args = PowerConfig.from_argv(argv, description=__doc__)
    cli.require(os.path.isfile(args.k_map), f"--k_map {args.k_map}: no such file")
    cli.require(0 < args.alpha < 1, f"--alpha must be in (0, 1) (got {args.alpha})")
    cli.require(len(set(args.allowed_K)) >= 2, "--allowed_K needs two or more K")
    cli.writable_file(args.out, "--out")
    result = analysis(
        args.k_map, sorted(set(args.allowed_K)), args.alpha, args.tests, args.core_seconds_per_run, args.seed_sd
    )
    write_json(args.out, result)
    c = result["contrast"]
    print(
        f"seed SD {result['seed_sd_used']:.4f}, beta {result['calibration']['beta']:.4f} per unit relative error; "
        f"largest implied contrast {c['settings']} at K {c['K']}: D = {c['implied_effect']:.4g}; "
        f"seeds per cell {result['seeds_per_cell']}, runs {result['runs_for_two_settings_x_K_list']}, "
        f"core hours {result['core_hours']}; observed interaction {result['observed_interaction']['value']:.4f} "
        f"-> {result['observed_interaction']['seeds_per_cell']} seeds per cell\n-> {args.out}"
    )


if __name__ == "__main__":
    cli.run(main)
