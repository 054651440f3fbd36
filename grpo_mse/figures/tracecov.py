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
    positive = any(v > 0 for means in result["conditional_on_x"].values() for v in means if v == v)
    ax.set_yscale("log" if positive else "linear")  # all zero (e.g. every reward equal): a log axis cannot draw
    ax.set_xlim(min(ks) / 1.25, max(ks) * 1.25)
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


def ratio_band(result: dict, name: str = "grpo/oracleV") -> tuple[list[float], list[float]] | None:
    """(lower, upper) of the paired bootstrap 95% interval of a ratio per K, from the run's ``paired`` entry."""
    series = result.get("paired", {}).get("ratio", {}).get(name)
    if not series or any(s["ci95"] is None for s in series):
        return None
    return [s["ci95"][0] for s in series], [s["ci95"][1] for s in series]


def draw_ratio_panel(ax, results: list[tuple[str, dict]]) -> None:
    """MSE_GRPO / MSE_oracle against K for each run (the U-statistic gap, -> 1 as K grows)."""
    for label, result in results:
        values = result["conditional_on_x"]
        if "grpo" in values and "oracleV" in values:
            ratios = [g / o if o else float("nan") for g, o in zip(values["grpo"], values["oracleV"])]
            line = ax.plot(result["K_list"], ratios, marker="o", label=label)[0]
            band = ratio_band(result)
            if band:
                ax.fill_between(result["K_list"], *band, color=line.get_color(), alpha=0.15,
                                label=f"{label}: paired 95% interval")
            theory = result.get("theory") or {}
            if "grpo" in theory and "oracleV" in theory:
                ax.plot(theory["K"], [g / o if o else float("nan") for g, o in zip(theory["grpo"], theory["oracleV"])],
                        linestyle="--", color=line.get_color(), alpha=0.7, label=f"{label} (exact)")
    ax.axhline(1.0, color="gray", linestyle=":")
    ax.set_xscale("log", base=2)
    ks = sorted({k for _, result in results for k in result["K_list"]})
    ax.set_xlim(min(ks) / 1.25, max(ks) * 1.25)  # also when every ratio is undefined (nothing drawn)
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
    """Exact error c1 K/N + c2/N + c3/(N (K-1)) against K at budget N (the paper's c1 K/N + c2/N + c3/(N K)
    dotted), with the exact K* and its joint-bootstrap interval, the paper's sqrt(c3/c1) and the best allowed K."""
    import numpy as np

    from grpo_mse.analysis.advisor import allowed_group_sizes, best_allowed_k, exact_error, paper_bound

    advice = result["group_size_advisor"]
    pooled, ci = advice["pooled"], advice["ci95"]
    c1, c2, c3 = pooled["c1"], pooled["c2"], pooled["c3"]
    ks = np.logspace(np.log2(1.5), np.log2(max(budget, 4)), 300, base=2)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ax.plot(ks, exact_error(c1, c2, c3, ks, budget), color="tab:blue", label=f"exact: c1 K/N + c2/N + c3/(N(K-1)), "
            f"N={budget:g}")
    ax.plot(ks, paper_bound(c1, c2, c3, ks, budget), color="tab:blue", linestyle=":", label="paper: ... + c3/(N K)")
    star = pooled.get("K_star_exact")
    if star and np.isfinite(star):
        ax.axvline(star, color="tab:red", linestyle="--", label=f"exact K* = 1 + sqrt(c3/c1) = {star:.3g}")
        if ci.get("K_star_exact"):
            low, high = ci["K_star_exact"]
            ax.axvspan(low, min(high, ks[-1]), color="tab:red", alpha=0.12, label="95% joint bootstrap interval")
    if pooled.get("K_star_paper"):
        ax.axvline(pooled["K_star_paper"], color="gray", linestyle=":", label=f"paper sqrt(c3/c1) = "
                   f"{pooled['K_star_paper']:.3g}")
    allowed = allowed_group_sizes(int(budget))
    best = float(best_allowed_k(c1, c3, allowed)[0])
    if np.isfinite(best):
        ax.plot([best], [float(exact_error(c1, c2, c3, best, budget))], marker="*", markersize=12, color="tab:red",
                linestyle="none", label=f"best power of two: K = {best:g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("group size K")
    ax.set_ylabel("error per step at budget N")
    ax.set_title(f"group-size advisor: c1={c1:.3g}, c2={c2:.3g}, c3={c3:.3g}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out_stem, formats=("png", "pdf"))
