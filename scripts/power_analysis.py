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

import json
import os
from dataclasses import dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json
from studies.advisor.validation_power import (
    best_contrast,
    calibration,
    map_settings,
    relative_errors,
    seeds_for_power,
    separated_pairs,
)

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


def sweep_cells(csv: str, prediction: dict) -> tuple[dict, np.ndarray]:
    """({K: per-seed metric values}, the advisor's relative errors at the sorted K) of one committed sweep."""
    from grpo_mse.training.runs_table import read_training
    from studies.advisor.training_runs import run_means

    runs = run_means(read_training(csv, METRIC), METRIC)
    cells = {int(k): group["value"].to_numpy() for k, group in runs.groupby("K")}
    return cells, relative_errors(*[float(prediction[c]) for c in ("c1", "c2", "c3")], sorted(cells))


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
    sigma = seed_sd if seed_sd is not None else fitted.seed_sd
    contrast = best_contrast(settings, ks)
    level = alpha / tests
    implied = fitted.beta * contrast.relative_contrast
    n = seeds_for_power(implied, sigma, level)
    observed = {  # the committed sweeps' own interaction at the contrast's K, for scale
        "K": contrast.K,
        "value": float(
            np.subtract(*[sweeps["train_mixed"][0][k].mean() for k in contrast.K])
            - np.subtract(*[sweeps["train_mixed_t1.5"][0][k].mean() for k in contrast.K])
        ),
    }
    observed["seeds_per_cell"] = seeds_for_power(observed["value"], sigma, level)
    runs = None if n is None else n * 2 * len(ks)
    return {
        "k_map": k_map_path,
        "allowed_K": ks,
        "calibration": {
            **fitted.to_json(),
            "sweeps": {name: list(paths) for name, paths in SWEEPS.items()},
            "metric": METRIC,
        },
        "seed_sd_used": sigma,
        "settings_with_Kstar_ratio_3_and_separate_intervals": separated_pairs(settings),
        "contrast": {**contrast.to_json(), "implied_effect": implied},
        "alpha": alpha,
        "confirmatory_tests": tests,
        "test_level": level,
        "power": 0.8,
        "seeds_per_cell": n,
        "seeds_per_cell_at_beta_ci95": [  # the slope's uncertainty: the implied effect at each end of its interval
            seeds_for_power(b * contrast.relative_contrast, sigma, level) for b in fitted.beta_ci95
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
    require(os.path.isfile(args.k_map), f"--k_map {args.k_map}: no such file")
    require(0 < args.alpha < 1, f"--alpha must be in (0, 1) (got {args.alpha})")
    require(len(set(args.allowed_K)) >= 2, "--allowed_K needs two or more K")
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
