"""Figure-4 style plots from saved trace-of-covariance results (never recomputes anything)."""

from __future__ import annotations

import io
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grpo_mse.gradients import estimators as est  # noqa: E402
from grpo_mse.tables.outputs import write_atomic  # noqa: E402

PAPER_NAMES = {"vanilla": "naive", "grpo": "grpo", "oracle": "oracleV"}


def style(name: str) -> dict:
    """matplotlib ``color`` and ``label`` of estimator ``name`` from the registry (the name itself if unknown)."""
    entry = est.REGISTRY.get(name)
    return {"color": entry.color, "label": entry.label} if entry else {"color": None, "label": name}


def draw_mse_panel(ax, result: dict, title: str = "", theory: dict | None = None) -> None:
    """MSE (mean trace over prompts) against K with 95% error bars, log2 K axis, log y axis."""
    ks = result["K_list"]
    for name, means in result["conditional_on_x"].items():
        ax.errorbar(ks, means, yerr=result.get("ci95", {}).get(name), marker="o", capsize=3, **style(name))
        if theory and name in theory:
            ax.plot(theory["K"], theory[name], linestyle="--", alpha=0.7, color=style(name)["color"],
                    label=f"{style(name)['label']} (exact)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("group size K")
    unbiased_only = set(result["conditional_on_x"]) <= set(est.UNBIASED)
    ax.set_ylabel("MSE = tr Cov (mean over prompts)" if unbiased_only
                  else "tr Cov, mean over prompts (= MSE if unbiased)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    crowded = len(ax.get_legend_handles_labels()[1]) > 6
    ax.legend(fontsize=7 if crowded else 8, ncol=2 if crowded else 1)


def theory_overlay(theory_json: dict, names) -> dict:
    """Dashed curves for draw_mse_panel from a theory JSON: {"K": K_list, name: mean exact tr Cov per K}.

    tr Cov, not MSE: a run's conditional_on_x is the trace of covariance (= MSE only for unbiased estimators).
    """
    curves = {"K": theory_json["K_list"]}
    curves.update({n: theory_json["trace_cov"][n] for n in names if n in theory_json["trace_cov"]})
    return curves


def draw_ratio_panel(ax, results: list[tuple[str, dict]]) -> None:
    """MSE_GRPO / MSE_oracle against K for each run (the U-statistic gap, -> 1 as K grows)."""
    for label, result in results:
        values = result["conditional_on_x"]
        if "grpo" in values and "oracleV" in values:
            ratios = [g / o if o else float("nan") for g, o in zip(values["grpo"], values["oracleV"])]
            line = ax.plot(result["K_list"], ratios, marker="o", label=label)[0]
            theory = result.get("theory") or {}
            if "grpo" in theory and "oracleV" in theory:
                ax.plot(theory["K"], [g / o if o else float("nan") for g, o in zip(theory["grpo"], theory["oracleV"])],
                        linestyle="--", color=line.get_color(), alpha=0.7, label=f"{label} (exact)")
    ax.axhline(1.0, color="gray", linestyle=":")
    ax.set_xscale("log", base=2)
    ks = sorted({k for _, result in results for k in result["K_list"]})
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("group size K")
    ax.set_ylabel("MSE GRPO / MSE oracle")
    ax.set_title("GRPO approaches the oracle baseline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def save(fig, path_without_suffix: str, formats=("png",)) -> list[str]:
    """Write ``fig`` (150 dpi, tight box) as path.SUFFIX for each format, each atomically; close it; the paths."""
    paths = []
    for suffix in formats:
        path = f"{path_without_suffix}.{suffix}"
        image = io.BytesIO()
        fig.savefig(image, format=suffix, dpi=150, bbox_inches="tight")
        write_atomic(path, image.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths


def plot_run(result: dict, png_path: str) -> str:
    """The three curves of one run against K, as the original's single PNG."""
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    draw_mse_panel(ax, result, title=os.path.basename(str(result.get("config", {}).get("model", ""))))
    return save(fig, png_path[:-4] if png_path.endswith(".png") else png_path)[0]


def plot_advisor(result: dict, budget: float, out_stem: str) -> list[str]:
    """Predicted bound c1 K/N + c2/N + c3/(N K) against K at budget N, with K* and its interval."""
    import numpy as np

    from grpo_mse.analysis.advisor import error_bound

    advice = result["group_size_advisor"]
    pooled, ci = advice["pooled"], advice["ci95"]
    ks = np.logspace(0, np.log2(max(budget, 4)), 200, base=2)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    c1 = max(pooled["c1"], 0.0)
    ax.plot(ks, error_bound(c1, pooled["c2"], max(pooled["c3"], 0.0), ks, budget), color="tab:blue",
            label=f"c1 K/N + c2/N + c3/(N K), N={budget:g}")
    if pooled["K_star"]:
        ax.axvline(pooled["K_star"], color="tab:red", linestyle="--", label=f"K* = {pooled['K_star']:.3g}")
        if ci.get("K_star"):
            ax.axvspan(*ci["K_star"], color="tab:red", alpha=0.12, label="95% bootstrap interval")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("group size K")
    ax.set_ylabel("error bound")
    ax.set_title(f"group-size advisor: c1={pooled['c1']:.3g}, c2={pooled['c2']:.3g}, c3={pooled['c3']:.3g}",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out_stem, formats=("png", "pdf"))
