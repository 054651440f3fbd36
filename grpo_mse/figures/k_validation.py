"""The group-size advisor against training (scripts/k_validation.sh): data subsets, predictions, summary, figure.

  python -m grpo_mse.figures.k_validation subset DATA_DIR OUT_DIR --kinds division --n_test 200
  python -m grpo_mse.figures.k_validation predict RUN.json --name S --out prediction_S.json
  python -m grpo_mse.figures.k_validation pilot pilot_runs.csv [--min_gain 0.03]   # exit 1: the pilot is flat
  python -m grpo_mse.figures.k_validation summarize --setting S runs.csv prediction_S.json START ... --out_dir DIR
  python -m grpo_mse.figures.k_validation adaptive adaptive_runs.csv sweep_runs.csv --name S --out_dir DIR

Per run the metric is the mean held-out greedy accuracy over the validation steps after step 0. Per K: the mean
over seeds with a 95% Student-t interval. Two K are "separated" when the 95% Welch interval of the difference of
their means excludes 0. The advisor's predicted budgeted error at K is c1 K + c2 + c3/(K - 1) (times 1/N, which
does not change ranks); the check is Spearman's rank correlation between it and the observed mean across K
(negative when the K with smaller predicted error train better).

Across settings (``compare``): does the sweep's best K move the way the advisor's K* moves? Per pair of settings,
the direction of K* (up, down, same) against the direction of the best K, with the share of 2000 bootstrap
replicates (seeds resampled within each K of each setting, independently per setting) in which the best K moves
the advisor's way, the opposite way, or not at all.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import sys
from dataclasses import dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.analysis import advisor
from grpo_mse.analysis.sweep_stats import best_k_draws, best_k_shares, predicted_error, spearman, welch_interval
from grpo_mse.flags import Flags, option, parse_command
from grpo_mse.gradients import estimators as est
from grpo_mse.tables.outputs import mean_t_interval, read_json, to_json, write_atomic
from grpo_mse.training.run_identity import INCOMPLETE
from grpo_mse.training.runs_table import ACCURACY, read_training, run_label, select_runs, with_run_columns

KINDS = ("mixed", "division", "nodivision")


def is_division(prompt_text: str) -> bool:
    """True for an exact-division problem: the last line of the prompt holds ' / '."""
    return " / " in prompt_text.strip().split("\n")[-1]


def keep_row(prompt_text: str, kinds: str) -> bool:
    if kinds not in KINDS:
        raise cli.InputError(f"--kinds {kinds!r}: choose from {', '.join(KINDS)}")
    return kinds == "mixed" or is_division(prompt_text) == (kinds == "division")


def subset(data_dir: str, out_dir: str, kinds: str, n_test: int) -> dict:
    """train.parquet and test.parquet of ``data_dir`` restricted to ``kinds``; the first ``n_test`` test rows."""
    import pandas as pd

    counts = {}
    os.makedirs(out_dir, exist_ok=True)
    for split in ("train", "test"):
        path = os.path.join(data_dir, f"{split}.parquet")
        cli.require(os.path.isfile(path), f"{path} not found (run Policy_Optimization/prepare_data.py)")
        frame = pd.read_parquet(path)
        mask = [keep_row(p[-1]["content"], kinds) for p in frame["prompt"]]
        kept = frame[mask]
        if split == "test":
            cli.require(len(kept) >= n_test, f"only {len(kept)} {kinds} test rows, fewer than --n_test {n_test}")
            kept = kept.head(n_test)
        cli.require(len(kept) > 0, f"no {kinds} rows in {path}")
        kept.reset_index(drop=True).to_parquet(os.path.join(out_dir, f"{split}.parquet"))
        counts[split] = len(kept)
    return counts


def predict(run: dict, name: str, written_at: str | None = None) -> dict:
    """The advisor's prediction from a run_tracecov JSON, stamped with the time it is written. K* and the best
    allowed K are stated only where the advisor identifies them (``advisor.advice_status``): null otherwise,
    with ``message`` saying why (c1 or c3 undefined, infinite, <= 0, or an interval reaching 0)."""
    adv = run.get("group_size_advisor")
    cli.require(isinstance(adv, dict) and "pooled" in adv, "the run has no group_size_advisor (was --no_advisor set?)")
    pooled, ci = adv["pooled"], adv.get("ci95") or {}
    now = advisor.advice_status(adv)
    return {
        "name": name,
        "identified": now["identified"],
        "message": now["message"],
        "K_star_exact": now["K_star_exact"],
        "ci95": ci.get("K_star_exact") if now["identified"] else None,
        "best_allowed_K": now["K_best"],
        "allowed_K": adv.get("allowed_K"),
        "c1": pooled.get("c1"),
        "c2": pooled.get("c2"),
        "c3": pooled.get("c3"),
        "c_ci95": {c: ci.get(c) for c in ("c1", "c2", "c3")},
        "budget": adv.get("budget"),
        "written_at": written_at or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **measured_prediction(adv),
    }


def measured_prediction(adv: dict) -> dict:
    """For advice on std-normalised GRPO: {"estimator", "measured_K_best" (null unless its intervals identify
    it), "measured_message"}; {"estimator": "grpo"} otherwise."""
    curve = adv.get("measured_curve")
    if not isinstance(curve, dict):
        return {"estimator": adv.get("estimator", est.GRPO)}
    return {
        "estimator": curve.get("estimator"),
        "measured_K_best": curve.get("K_best") if curve.get("identified") is True else None,
        "measured_message": curve.get("message"),
    }


def prediction_status(prediction: dict) -> dict:
    """``advisor.status`` of a saved prediction (recomputed from its constants: older files stated a best K
    from unidentified constants)."""
    return advisor.status(
        prediction, prediction.get("c_ci95") or {}, prediction.get("allowed_K"), prediction.get("budget")
    )


def describe_prediction(prediction: dict) -> str:
    """ "K*_exact = 4.21 [1.59, 6.06], best allowed K = 4" where identified, else "K* not identified: why"."""
    now = prediction_status(prediction)
    if not now["identified"]:
        return f"K* not identified ({now['message']})"
    low, high = advisor.interval_of(prediction.get("ci95")) or (math.nan, math.nan)
    best = now["K_best"] if now["K_best"] is not None else "a tie"
    return (
        f"K*_exact = {advisor.rounded(now['K_star_exact'])} [{advisor.rounded(low)}, {advisor.rounded(high)}], "
        f"best allowed K = {best}"
    )


def run_metric(frame, metric: str):
    """Per (K, seed): the mean of ``metric`` over its validation steps after step 0. A run whose validation steps
    are not those of the longest run (unfinished or interrupted), or whose recorded status is interrupted, failed
    or truncated (grpo_mse.training.run_identity), is left out with a note on stderr, so every run averages the
    same steps."""
    sub = with_run_columns(frame[(frame["metric"] == metric) & (frame["step"] > 0)])
    steps = sub.groupby(["K", "seed"])["step"].apply(lambda s: tuple(sorted(set(s))))
    status = sub.groupby(["K", "seed"])["status"].first()
    full = max(steps, key=len) if len(steps) else ()
    keep = steps[(steps == full) & ~status.isin(INCOMPLETE)].index
    left_out = [
        f"{run_label(k, seed)} ({status[(k, seed)] if status[(k, seed)] in INCOMPLETE else 'steps ' + str(list(s))})"
        for (k, seed), s in steps.items()
        if (k, seed) not in keep
    ]
    if left_out:
        print(f"note: left out {len(left_out)} run(s): {'; '.join(left_out)}", file=sys.stderr)
    sub = sub.set_index(["K", "seed"]).loc[keep].reset_index()
    return sub.groupby(["K", "seed"])["value"].mean().reset_index()


def pilot_gain(frame, metric: str) -> float:
    """Mean over the pilot runs of (accuracy at the common step S - accuracy at the first step every run logged),
    with Table 2's rule (training.runs_table.select_runs): S is the last step every included run reached, and
    interrupted, failed or truncated runs are left out (listed on stderr), so a run that stopped early is not
    compared at its own last step."""
    selection = select_runs(frame, metric)
    if selection.excluded:
        print(f"note: left out {len(selection.excluded)} run(s): {'; '.join(selection.excluded)}", file=sys.stderr)
    sub = selection.frame
    runs = sub.groupby(["K", "seed"])
    first = min(set.intersection(*(set(run["step"]) for _, run in runs)))
    at = sub.set_index(["K", "seed", "step"])["value"]
    return float(np.mean([at[(k, seed, selection.step)] - at[(k, seed, first)] for (k, seed), _ in runs]))


def sweep_summary(frame, metric: str, started_at: str) -> dict:
    """The "sweep" block of summary.json from the collected runs of one setting."""
    runs = run_metric(frame, metric)
    cli.require(not runs.empty, f"no {metric} values after step 0")
    per_k, values = {}, {}
    for k, group in runs.groupby("K"):
        mean, half = mean_t_interval(group["value"].tolist())
        values[int(k)] = group["value"].to_numpy()
        per_k[str(int(k))] = {"mean": mean, "ci95": share_interval(metric, mean, half), "n_seeds": int(len(group))}
    ks = sorted(values)
    separated = []
    for i, k1 in enumerate(ks):
        for k2 in ks[i + 1 :]:
            if min(len(values[k1]), len(values[k2])) < 2:
                continue
            lo, hi = welch_interval(values[k1], values[k2])
            if lo > 0 or hi < 0:
                separated.append([k1, k2])
    best = max(ks, key=lambda k: per_k[str(k)]["mean"])
    return {
        "metric": f"mean of {metric} over validation steps > 0",
        "per_K": per_k,
        "best_K": best,
        "started_at": started_at,
        "separated_pairs": separated,
    }


def compare(a: dict, b: dict, draws_a, draws_b) -> dict:
    """Does the best K move from setting a to setting b in the direction of the advisor's K*? The advisor's
    direction is 0 ("none") unless K* is identified in both settings."""
    k_a, k_b = a["advisor"]["K_star_exact"], b["advisor"]["K_star_exact"]
    advisor_way = int(np.sign(k_b - k_a)) if k_a is not None and k_b is not None else 0
    moves = np.sign(np.asarray(draws_b, float) - np.asarray(draws_a, float))
    sweep = int(np.sign(b["sweep"]["best_K"] - a["sweep"]["best_K"]))
    shares = {
        "advisor_way": float(np.mean(moves == advisor_way)) if advisor_way else float("nan"),
        "opposite_way": float(np.mean(moves == -advisor_way)) if advisor_way else float("nan"),
        "no_move": float(np.mean(moves == 0)),
    }
    return {
        "settings": [a["name"], b["name"]],
        "advisor_K_star": [k_a, k_b],
        "advisor_direction": advisor_way,
        "sweep_best_K": [a["sweep"]["best_K"], b["sweep"]["best_K"]],
        "sweep_direction": sweep,
        "agree": bool(advisor_way != 0 and sweep == advisor_way),
        "bootstrap_best_K_shares": shares,
        "note": "direction: +1 up, -1 down, 0 same (advisor: also 0 when K* is not identified in a setting), "
        "from the first setting to the second; shares over replicates resampling seeds within each K",
    }


def setting_summary(name: str, frame, prediction: dict, started_at: str, metric: str) -> dict:
    sweep = sweep_summary(frame, metric, started_at)
    ks = sorted(int(k) for k in sweep["per_K"])
    errors = [predicted_error(prediction, k) for k in ks]
    observed = [sweep["per_K"][str(k)]["mean"] for k in ks]
    now = prediction_status(prediction)
    stated = {
        "identified": now["identified"],
        "message": now["message"],
        "K_star_exact": now["K_star_exact"],
        "ci95": prediction.get("ci95") if now["identified"] else None,
        "best_allowed_K": now["K_best"],
        "written_at": prediction.get("written_at"),
    }
    return {
        "name": name,
        "advisor": stated,
        "sweep": sweep,
        "rank_correlation": {
            "spearman_predicted_error_vs_metric": spearman(errors, observed),
            "K": ks,
            "predicted_error_times_N": errors,
            "note": "negative: K with smaller predicted error train better",
        },
    }


def plot_setting(summary: dict, path: str, runs=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep, adv = summary["sweep"], summary["advisor"]
    ks = sorted(int(k) for k in sweep["per_K"])
    means = [sweep["per_K"][str(k)]["mean"] for k in ks]
    lo = [sweep["per_K"][str(k)]["ci95"][0] for k in ks]
    hi = [sweep["per_K"][str(k)]["ci95"][1] for k in ks]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    if runs is not None:
        ax.scatter(runs["K"], runs["value"], s=10, color="0.6", label="one seed", zorder=1)
    ax.errorbar(
        ks,
        means,
        yerr=[np.subtract(means, lo), np.subtract(hi, means)],
        fmt="o-",
        capsize=3,
        color="C0",
        label="mean, 95% t-interval",
        zorder=3,
    )
    right = max(ks) * 1.5
    k_star, ci = adv.get("K_star_exact"), advisor.interval_of(adv.get("ci95"))
    if k_star is not None and ci is not None and math.isfinite(ci[0]):  # identified K* only
        ax.axvspan(
            max(ci[0], min(ks) / 1.5),
            min(ci[1] if math.isfinite(ci[1]) else right, right),
            color="C1",
            alpha=0.15,
            label="advisor K* 95% interval",
        )
    if k_star is not None and math.isfinite(k_star):
        ax.axvline(k_star, color="C1", label=f"advisor K* = {k_star:.2f}")
    if adv.get("best_allowed_K") is not None:
        best = adv["best_allowed_K"]
        ax.axvline(best, color="C1", ls=":", label=f"advisor best allowed K = {best}")
    if k_star is None:
        ax.plot([], [], " ", label="advisor K* not identified")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlim(min(ks) / 1.5, right)
    ax.set_xlabel("group size K (fixed budget)")
    ax.set_ylabel("held-out greedy accuracy\n(mean over validation steps)")
    rho = summary["rank_correlation"]["spearman_predicted_error_vs_metric"]
    ax.set_title(f"{summary['name']}: best K = {sweep['best_K']}; Spearman(pred. error, acc) = {rho:.2f}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_settings(summaries: list, path: str) -> None:
    """All settings on one axis: each sweep's mean metric minus its best mean, with the advisor's K* and interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    all_ks = sorted({int(k) for s in summaries for k in s["sweep"]["per_K"]})
    right = max(all_ks) * 1.5
    for i, summary in enumerate(summaries):
        sweep, adv, color = summary["sweep"], summary["advisor"], f"C{i}"
        ks = sorted(int(k) for k in sweep["per_K"])
        top = max(sweep["per_K"][str(k)]["mean"] for k in ks)
        means = np.array([sweep["per_K"][str(k)]["mean"] for k in ks]) - top
        lo = np.array([sweep["per_K"][str(k)]["ci95"][0] for k in ks]) - top
        hi = np.array([sweep["per_K"][str(k)]["ci95"][1] for k in ks]) - top
        shift = 1 + 0.04 * (i - (len(summaries) - 1) / 2)  # side by side on the log axis
        ax.errorbar(
            np.multiply(ks, shift),
            means,
            yerr=[means - lo, hi - means],
            fmt="o-",
            capsize=3,
            color=color,
            label=f"{summary['name']}: best K = {sweep['best_K']}",
        )
        k_star, ci = adv.get("K_star_exact"), advisor.interval_of(adv.get("ci95"))
        if k_star is None or ci is None or not math.isfinite(k_star):  # not identified: no K* drawn
            ax.plot([], [], " ", label=f"{summary['name']}: advisor K* not identified")
            continue
        if math.isfinite(ci[0]):
            ax.axvspan(max(ci[0], min(all_ks) / 1.5), min(ci[1], right), color=color, alpha=0.08)
        ax.axvline(
            k_star,
            color=color,
            ls="--",
            label=f"advisor K* = {k_star:.2f} [{advisor.rounded(ci[0])}, {advisor.rounded(ci[1])}]",
        )
    ax.axhline(0, color="0.7", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(all_ks, [str(k) for k in all_ks])
    ax.set_xlim(min(all_ks) / 1.5, right)
    ax.set_xlabel("group size K (fixed budget)")
    ax.set_ylabel("held-out accuracy minus the setting's best\n(mean over validation steps, 95% t-interval)")
    ax.set_title("does the training optimum move with the advisor's K*?", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


ADAPTIVE_FIELDS = ("K", "K_star_exact", "c1", "c2", "c3", "identified", "seconds")


def adaptive_choices(frame) -> list[dict]:
    """One row per (seed, re-estimate step): the K chosen for the following steps and the advisor's numbers
    (``adaptive_k/*`` metrics of the adaptive runs; K* is missing where it was infinite or undefined)."""
    sub = frame[frame["metric"].str.startswith("adaptive_k/")]
    rows = []
    for (seed, step), group in sub.groupby(["seed", "step"]):
        values = dict(zip(group["metric"].str.removeprefix("adaptive_k/"), group["value"]))
        rows.append({"seed": int(seed), "step": int(step), **{f: values.get(f) for f in ADAPTIVE_FIELDS}})
    return rows


def arm(values, metric: str) -> dict:
    """One arm's per-seed metric: mean, 95% Student-t interval over seeds (``share_interval``), the seed count and
    the values."""
    mean, half = mean_t_interval(list(values))
    return {"mean": mean, "ci95": share_interval(metric, mean, half), "n_seeds": len(values), "per_seed": list(values)}


def share_interval(metric: str, mean: float, half: float) -> list[float]:
    """[mean - half, mean + half], clipped to [0, 1] when ``metric`` is an accuracy (a share: a t-interval over a
    few seeds can cross the bounds)."""
    low, high = mean - half, mean + half
    return [max(low, 0.0), min(high, 1.0)] if ACCURACY.search(metric) else [low, high]


def adaptive_summary(adaptive, sweep, metric: str, name: str, started_at: str | None = None) -> dict:
    """Adaptive K against every fixed K of the sweep (the same metric per run): means, 95% t-intervals, and the
    95% Welch interval of (adaptive - fixed); the best fixed K is the sweep's, chosen on the sweep alone."""
    runs = run_metric(adaptive, metric)
    fixed = run_metric(sweep, metric)
    cli.require(not runs.empty, f"no {metric} values after step 0 in the adaptive runs")
    cli.require(not fixed.empty, f"no {metric} values after step 0 in the sweep runs")
    ours = runs.sort_values("seed")["value"].to_numpy(float)
    per_k = {int(k): g.sort_values("seed")["value"].to_numpy(float) for k, g in fixed.groupby("K")}
    best = max(per_k, key=lambda k: per_k[k].mean())
    comparisons = {}
    for k, values in sorted(per_k.items()):
        lo, hi = welch_interval(ours, values) if min(len(ours), len(values)) >= 2 else (math.nan, math.nan)
        comparisons[str(k)] = {
            "difference": float(ours.mean() - values.mean()),
            "welch_ci95": [lo, hi],
            "separated": bool(lo > 0 or hi < 0),
        }
    choices = adaptive_choices(adaptive)
    steps = adaptive[adaptive["metric"] == "trl/group_size"]
    share = {str(int(k)): float(n / len(steps)) for k, n in steps["value"].value_counts().sort_index().items()}
    per_step = {str(int(seed)): [int(v) for v in g.sort_values("step")["value"]] for seed, g in steps.groupby("seed")}
    return {
        "setting": name,
        "metric": f"mean of {metric} over validation steps > 0",
        "started_at": started_at,
        "adaptive": arm(ours, metric),
        "fixed": {str(k): arm(v, metric) for k, v in sorted(per_k.items())},
        "best_fixed_K": best,
        "adaptive_minus_fixed": comparisons,
        "K_chosen": choices,
        "K_share_of_steps": share,
        "K_per_step": per_step,
        "identified_share": float(np.mean([c["identified"] for c in choices])) if choices else math.nan,
        "note": "per run: mean held-out greedy accuracy over the validation steps after step 0; per arm: mean and "
        "95% t-interval over seeds; adaptive_minus_fixed: 95% Welch interval of the difference of means; K_chosen: "
        "the K the advisor chose at each re-estimate (used from the next step on); K_share_of_steps: the share of "
        "training steps run at each K (trl/group_size); K_per_step: per seed, the K of steps 1, 2, ...",
    }


def plot_adaptive(summary: dict, path: str) -> None:
    """Left: each fixed K and adaptive K (seeds as dots, mean and 95% interval). Right: the K in force per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8), gridspec_kw={"width_ratios": [1.2, 1]})
    labels = [f"K={k}" for k in summary["fixed"]] + ["adaptive"]
    arms = list(summary["fixed"].values()) + [summary["adaptive"]]
    for i, (label, a) in enumerate(zip(labels, arms)):
        color = "C3" if label == "adaptive" else "C0"
        left.scatter([i] * len(a["per_seed"]), a["per_seed"], s=10, color="0.6", zorder=1)
        left.errorbar(
            i,
            a["mean"],
            yerr=[[a["mean"] - a["ci95"][0]], [a["ci95"][1] - a["mean"]]],
            fmt="o",
            capsize=4,
            color=color,
            zorder=3,
        )
    left.set_xticks(range(len(labels)), labels)
    left.set_ylabel("held-out greedy accuracy\n(mean over validation steps)")
    title = f"{summary['setting']}: adaptive K vs the sweep's fixed K (best {summary['best_fixed_K']})"
    left.set_title(title, fontsize=9)
    for j, (seed, ks) in enumerate(sorted(summary["K_per_step"].items(), key=lambda item: int(item[0]))):
        jitter = 1 + 0.03 * (j - (len(summary["K_per_step"]) - 1) / 2)  # seeds side by side on the log axis
        steps = np.arange(1, len(ks) + 1)
        right.step(steps, np.asarray(ks) * jitter, where="mid", alpha=0.7, label=f"seed {seed}")
    right.set_yscale("log", base=2)
    ks = [int(k) for k in summary["fixed"]]
    right.set_yticks(ks, [str(k) for k in ks])
    right.set_xlabel("training step")
    right.set_ylabel("K in force (trl/group_size)")
    right.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"


@dataclass(kw_only=True)
class SubsetConfig(Flags):
    """restrict a prepared arithmetic dataset to some problem kinds"""

    data_dir: str = option(positional=True, help="a prepared arithmetic dataset (train.parquet, test.parquet)")
    out_dir: str = option(positional=True, help="where the restricted dataset goes")
    kinds: str = option(choices=KINDS, help="the problem kinds kept")
    n_test: int = option(200, minimum=1, help="test rows kept (the first ones)")


@dataclass(kw_only=True)
class PredictConfig(Flags):
    """the advisor's prediction from a run_tracecov JSON, with the time"""

    run_json: str = option(positional=True, help="main JSON of run_tracecov.py (with its group_size_advisor)")
    name: str = option(help="the setting's name")
    out: str = option(help="JSON file for the prediction")


@dataclass(kw_only=True)
class PilotConfig(Flags):
    """exit 0 if the pilot runs learn (mean gain >= --min_gain), else exit 1"""

    runs_csv: str = option(positional=True, help="the pilot runs (CSV of collect_runs.py)")
    min_gain: float = option(0.03, type=cli.number(), help="mean accuracy gain that counts as learning")
    metric: str = option(METRIC, help="the accuracy compared")


@dataclass(kw_only=True)
class SummarizeConfig(Flags):
    """summary.json and one figure per setting"""

    setting: list[list[str]] = option(
        nargs=4,
        action="append",
        metavar=("NAME", "RUNS_CSV", "PREDICTION_JSON", "STARTED_AT"),
        help="one setting: its runs, the advisor's prediction, when its sweep started",
    )
    metric: str = option(METRIC, help="the accuracy compared")
    out_dir: str = option(help="where summary.json and the figures go")
    protocol_commit: str | None = option(
        None, help="git hash of the commit holding the protocol the sweep followed (recorded in summary.json)"
    )


@dataclass(kw_only=True)
class AdaptiveConfig(Flags):
    """adaptive-K runs against the fixed-K sweep: summary JSON, choices CSV, figure"""

    adaptive_csv: str = option(positional=True, help="the adaptive-K runs (CSV of collect_runs.py)")
    sweep_csv: str = option(positional=True, help="the fixed-K sweep's runs")
    name: str = option(help="the setting's name")
    metric: str = option(METRIC, help="the accuracy compared")
    started_at: str | None = option(None, help="when the adaptive runs started (recorded in the summary)")
    out_dir: str = option(help="where the summary JSON, choices CSV and figure go")


COMMANDS = {
    "subset": SubsetConfig,
    "predict": PredictConfig,
    "pilot": PilotConfig,
    "summarize": SummarizeConfig,
    "adaptive": AdaptiveConfig,
}


def main(argv=None) -> int:
    command, args = parse_command(COMMANDS, argv, description=__doc__)
    if command == "subset":
        counts = subset(args.data_dir, args.out_dir, args.kinds, args.n_test)
        print(f"{args.kinds}: {counts['train']} training, {counts['test']} test rows -> {args.out_dir}")
    elif command == "pilot":
        gain = pilot_gain(read_training(args.runs_csv, args.metric), args.metric)
        learns = gain >= args.min_gain
        print(f"{args.runs_csv}: mean gain {gain:+.3f} ({'learns' if learns else 'flat'}: threshold {args.min_gain})")
        return 0 if learns else 1
    elif command == "adaptive":
        from grpo_mse.tables.outputs import write_csv

        adaptive, sweep = read_training(args.adaptive_csv, args.metric), read_training(args.sweep_csv, args.metric)
        summary = adaptive_summary(adaptive, sweep, args.metric, args.name, args.started_at)
        os.makedirs(args.out_dir, exist_ok=True)
        columns = ["seed", "step", *ADAPTIVE_FIELDS]
        write_csv(os.path.join(args.out_dir, f"k_chosen_{args.name}.csv"), summary["K_chosen"], columns)
        plot_adaptive(summary, os.path.join(args.out_dir, f"adaptive_{args.name}.png"))
        write_atomic(os.path.join(args.out_dir, f"summary_{args.name}.json"), to_json(summary, indent=1))
        a = summary["adaptive"]
        print(f"{args.name}: adaptive K {a['mean']:.3f} [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}], {a['n_seeds']} seeds")
        for k, c in summary["adaptive_minus_fixed"].items():
            f = summary["fixed"][k]
            print(
                f"  fixed K={k}: {f['mean']:.3f} [{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}]; adaptive - fixed "
                f"{c['difference']:+.3f} [{c['welch_ci95'][0]:+.3f}, {c['welch_ci95'][1]:+.3f}]"
            )
    elif command == "predict":
        cli.writable_file(args.out, "--out")
        run = read_json(args.run_json, ("group_size_advisor",), "run_tracecov result")
        pred = predict(run, args.name)
        write_atomic(args.out, to_json(pred, indent=1))
        print(f"{args.name}: {describe_prediction(pred)} (written {pred['written_at']}) -> {args.out}")
    else:
        cli.require(
            args.protocol_commit is None or re.fullmatch(r"[0-9a-f]{7,40}", args.protocol_commit) is not None,
            f"--protocol_commit {args.protocol_commit!r}: give a git commit hash (7 to 40 hex digits)",
        )
        settings, draws = [], []
        names = [setting[0] for setting in args.setting]
        cli.require(len(set(names)) == len(names), f"--setting names repeat: {names}")
        os.makedirs(args.out_dir, exist_ok=True)
        for name, csv, pred_path, started_at in args.setting:
            pred = read_json(pred_path, ("c1", "c2", "c3"), "advisor prediction")
            frame = read_training(csv, args.metric)
            summary = setting_summary(name, frame, pred, started_at, args.metric)
            runs = run_metric(frame, args.metric)
            draws.append(best_k_draws(runs, seed=len(draws)))  # independent resampling per setting
            summary["sweep"]["best_K_bootstrap"] = best_k_shares(draws[-1])
            plot_setting(summary, os.path.join(args.out_dir, f"sweep_{name}.png"), runs)
            settings.append(summary)
            sw = summary["sweep"]
            print(
                f"{name}: advisor {describe_prediction(pred)}; "
                f"sweep best K {sw['best_K']}, separated {sw['separated_pairs']}, Spearman "
                f"{summary['rank_correlation']['spearman_predicted_error_vs_metric']:.2f}"
            )
        comparisons = [
            compare(settings[i], settings[j], draws[i], draws[j])
            for i in range(len(settings))
            for j in range(i + 1, len(settings))
        ]
        for c in comparisons:
            print(
                f"{c['settings'][0]} -> {c['settings'][1]}: advisor K* {c['advisor_direction']:+d}, sweep best K "
                f"{c['sweep_direction']:+d}; bootstrap shares {c['bootstrap_best_K_shares']}"
            )
        if len(settings) > 1:
            plot_settings(settings, os.path.join(args.out_dir, "sweep_settings.png"))
        write_atomic(
            os.path.join(args.out_dir, "summary.json"),
            to_json(
                {
                    "settings": settings,
                    "comparisons": comparisons,
                    **({"protocol_commit": args.protocol_commit} if args.protocol_commit else {}),
                },
                indent=1,
            ),
        )


if __name__ == "__main__":
    cli.run(main)
