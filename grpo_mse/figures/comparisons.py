"""What make_figures.py draws beside a run's MSE panel (figures/tracecov.py), from saved results only: the
GRPO-to-oracle ratio panel with its paired intervals, exact-theory overlays, and the group-size advisor's error
curve."""

from __future__ import annotations

import math

from grpo_mse.analysis import bootstrap, error_model
from grpo_mse.figures.tracecov import plt, save
from grpo_mse.gradients import estimators as est


def theory_overlay(theory_json: dict, names) -> dict:
    """Dashed curves for draw_mse_panel from a theory JSON: {"K": K_list, name: mean exact tr Cov per K}.

    tr Cov, not MSE: a run's conditional_on_x is the trace of covariance (= MSE only for unbiased estimators).
    """
    curves = {"K": theory_json["K_list"]}
    curves.update({n: theory_json["trace_cov"][n] for n in names if n in theory_json["trace_cov"]})
    return curves


def ratio_band(result: dict, name: str = f"{est.GRPO}/{est.ORACLE}") -> tuple[list[float], list[float]] | None:
    """(lower, upper) of the paired bootstrap 95% interval of a ratio per K, from the run's ``paired`` entry; a ratio
    of MSEs is >= 0, so a lower bound below 0 (older runs, few prompts) is drawn at 0. A bound saved as null is a
    non-finite one (JSON has no infinity: an oracle MSE near 0 in some replicates): an unbounded upper end is inf,
    drawn to the top of the axis, and a null lower end is 0."""
    series = result.get("paired", {}).get("ratio", {}).get(name)
    if not series or any(s["ci95"] is None for s in series):
        return None
    lower = [0.0 if s["ci95"][0] is None else max(s["ci95"][0], 0.0) for s in series]
    return lower, [math.inf if s["ci95"][1] is None else max(s["ci95"][1], 0.0) for s in series]


def draw_ratio_panel(ax, results: list[tuple[str, dict]]) -> None:
    """MSE_GRPO / MSE_oracle against K for each run (the U-statistic gap, -> 1 as K grows)."""
    bands = []  # drawn once the ratios have set the axis, so that an unbounded end reaches its top
    for label, result in results:
        values = result["conditional_on_x"]
        if est.GRPO in values and est.ORACLE in values:
            ratios = [g / o if o else float("nan") for g, o in zip(values[est.GRPO], values[est.ORACLE])]
            line = ax.plot(result["K_list"], ratios, marker="o", label=label)[0]
            band = ratio_band(result)
            if band:
                bands.append((result["K_list"], band, line.get_color(), f"{label}: paired 95% interval"))
            theory = result.get("theory") or {}
            if est.GRPO in theory and est.ORACLE in theory:
                exact = [g / o if o else float("nan") for g, o in zip(theory[est.GRPO], theory[est.ORACLE])]
                ax.plot(theory["K"], exact, linestyle="--", color=line.get_color(), alpha=0.7, label=f"{label} (exact)")
    ax.axhline(1.0, color="gray", linestyle=":")
    points = [float(y) for line in ax.get_lines() for y in line.get_ydata() if math.isfinite(float(y))]
    top = max([2.0, *points]) * 1.25
    ax.set_ylim(0, top)  # the ratios set the axis; a wide band (few prompts) runs off it
    for ks, (lower, upper), color, label in bands:
        ax.fill_between(ks, lower, [min(u, top) for u in upper], color=color, alpha=0.15, label=label)
    ax.set_xscale("log", base=2)
    ks = sorted({k for _, result in results for k in result["K_list"]})
    ax.set_xlim(min(ks) / 1.25, max(ks) * 1.25)  # also when every ratio is undefined (nothing drawn)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("group size K")
    ax.set_ylabel("MSE GRPO / MSE oracle")
    ax.set_title("GRPO approaches the oracle baseline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plot_advisor(result: dict, out_stem: str, budget: float | None = None) -> list[str]:
    """Exact error c1 K/N + c2/N + c3/(N (K-1)) against K at budget N (the paper's c1 K/N + c2/N + c3/(N K)
    dotted), with the exact K* and its joint-bootstrap interval, the paper's sqrt(c3/c1) and the best allowed K
    (only where the advisor identified it). N and the allowed K are the run's (saved in the JSON); ``budget``
    overrides N (the allowed K are then the powers of two dividing it) and the title says so."""
    import numpy as np

    advice = result["group_size_advisor"]
    pooled, ci = advice["pooled"], advice["ci95"]
    c1, c2, c3 = (bootstrap.number(pooled[name]) for name in ("c1", "c2", "c3"))
    saved = advice.get("budget", 1024)
    overridden = budget is not None and budget != saved
    budget = float(budget if budget is not None else saved)
    allowed = advice.get("allowed_K") if not overridden else None
    allowed = allowed or error_model.allowed_group_sizes(int(budget))
    ks = np.logspace(np.log2(1.5), np.log2(max(budget, 4)), 300, base=2)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    curve = error_model.exact_error(error_model.clipped(c1), c2, error_model.clipped(c3), ks, budget)
    ax.plot(
        ks,
        curve,
        color="tab:blue",
        label=f"exact: c1 K/N + c2/N + c3/(N(K-1)), N={budget:g}",
    )
    ax.plot(
        ks,
        error_model.paper_bound(error_model.clipped(c1), c2, error_model.clipped(c3), ks, budget),
        color="tab:blue",
        linestyle=":",
        label="paper: ... + c3/(N K)",
    )
    if overridden:
        now = error_model.status(pooled, ci, allowed, budget)
    else:
        now = error_model.advice_status({**advice, "allowed_K": allowed, "budget": budget})
    if now.identified:  # K* and the best K only where the advisor identifies them
        star = now.K_star_exact
        ax.axvline(star, color="tab:red", linestyle="--", label=f"exact K* = 1 + sqrt(c3/c1) = {star:.3g}")
        low, high = error_model.interval_of(ci.get("K_star_exact")) or (np.nan, np.nan)
        if np.isfinite(low):
            ax.axvspan(
                low,
                min(high, ks[-1]),
                color="tab:red",
                alpha=0.12,
                label="K* 95% joint bootstrap interval" + (" (to inf)" if np.isinf(high) else ""),
            )
        ax.axvline(star - 1, color="gray", linestyle=":", label=f"paper sqrt(c3/c1) = {star - 1:.3g}")
    best = now.K_best
    if best is not None:
        ax.plot(
            [best],
            [float(error_model.exact_error(c1, c2, c3, best, budget))],
            marker="*",
            markersize=12,
            color="tab:red",
            linestyle="none",
            label=f"best allowed K = {best:g}",
        )
    ax.set_xscale("log", base=2)
    if (np.isfinite(curve) & (curve > 0)).any():  # no log axis for a curve that is undefined, infinite or 0
        ax.set_yscale("log")
    ax.set_xlabel("group size K")
    ax.set_ylabel("error per step at budget N")
    title = f"group-size advisor: c1={c1:.3g}, c2={c2:.3g}, c3={c3:.3g}"
    if overridden:
        title += f"\nN = {budget:g} set by --budget (the run's advisor used N = {saved:g})"
    if best is None:
        title += "\n" + ("K* " if not now.identified else "") + now.message
    ax.set_title(title, fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out_stem, formats=("png", "pdf"))
