"""The figures of the group-size advisor against training (scripts/k_validation.py): one setting's sweep with the
advisor's K*, all settings on one axis, adaptive K against the fixed-K sweep. They draw saved summaries
(studies.advisor.k_validation) and compute nothing.
"""

from __future__ import annotations

import math

import numpy as np

from grpo_mse.analysis import bootstrap, error_model


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
    k_star, ci = adv.get("K_star_exact"), error_model.interval_of(adv.get("ci95"))
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
        k_star, ci = adv.get("K_star_exact"), error_model.interval_of(adv.get("ci95"))
        if k_star is None or ci is None or not math.isfinite(k_star):  # not identified: no K* drawn
            ax.plot([], [], " ", label=f"{summary['name']}: advisor K* not identified")
            continue
        if math.isfinite(ci[0]):
            ax.axvspan(max(ci[0], min(all_ks) / 1.5), min(ci[1], right), color=color, alpha=0.08)
        ax.axvline(
            k_star,
            color=color,
            ls="--",
            label=f"advisor K* = {k_star:.2f} [{bootstrap.rounded(ci[0])}, {bootstrap.rounded(ci[1])}]",
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
