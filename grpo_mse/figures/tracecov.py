"""A trace-of-covariance run's figure: its MSE against K per estimator (the PNG run_tracecov.py writes, and each
panel of make_figures.py's Figure 4), drawn from saved results (never recomputes anything). What only
make_figures.py draws (the ratio panel, exact-theory overlays, the advisor's curve) is in figures/comparisons.py."""

from __future__ import annotations

import io
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grpo_mse.gradients import estimators as est  # noqa: E402
from grpo_mse.tables.outputs import write_atomic  # noqa: E402

PAPER_NAMES = {"vanilla": est.VANILLA, "grpo": est.GRPO, "oracle": est.ORACLE}


def style(name: str) -> dict:
    """matplotlib ``color`` and ``label`` of estimator ``name`` from the registry (the name itself if unknown)."""
    entry = est.REGISTRY.get(name)
    return {"color": entry.color, "label": entry.label} if entry else {"color": None, "label": name}


def panel_curves(result: dict) -> tuple[dict, dict, str]:
    """(means, 95% half-widths, y label) drawn for a run: its MSE = tr Cov + bias^2 when the run saved it
    (``mse``: vanilla's squared bias at top_p < 1 included, as in the paired ratios and the README's tables),
    else the trace of covariance (= MSE for unbiased estimators)."""
    mse = result.get("mse")
    if (
        isinstance(mse, dict)
        and set(mse) == set(result["conditional_on_x"])
        and all(len(series) == len(result["K_list"]) for series in mse.values())
    ):
        return result["mse"], result.get("mse_ci95", {}), "MSE = tr Cov + bias² (mean over prompts)"
    unbiased_only = set(result["conditional_on_x"]) <= set(est.UNBIASED)
    label = "MSE = tr Cov (mean over prompts)" if unbiased_only else "tr Cov, mean over prompts (= MSE if unbiased)"
    return result["conditional_on_x"], result.get("ci95", {}), label


def draw_mse_panel(ax, result: dict, title: str = "", theory: dict | None = None) -> None:
    """MSE (mean over prompts, see panel_curves) against K with 95% error bars, log2 K axis, log y axis."""
    ks = result["K_list"]
    curves, half_widths, y_label = panel_curves(result)
    # nothing above 0 (e.g. every reward equal, every trace 0): a linear axis, where each value is drawn as it is
    log_axis = any(v > 0 for means in curves.values() for v in means if v == v)
    off_axis = False
    for name, means in curves.items():
        below_axis = [k for k, v in zip(ks, means) if log_axis and v <= 0]
        off_axis = off_axis or bool(below_axis)
        drawn = [float("nan") if k in below_axis else v for k, v in zip(ks, means)]
        colour, label = style(name)["color"], style(name)["label"] + below_zero_note(ks, means)
        ax.errorbar(ks, drawn, yerr=half_widths.get(name), marker="o", capsize=3, color=colour, label=label)
        if below_axis:  # a log axis drops them silently: a triangle at the axis' foot says they exist
            ax.plot(
                below_axis, [0.03] * len(below_axis), "v", color=colour, transform=ax.get_xaxis_transform(), zorder=5
            )
        if theory and name in theory:
            ax.plot(
                theory["K"],
                theory[name],
                linestyle="--",
                alpha=0.7,
                color=style(name)["color"],
                label=f"{style(name)['label']} (exact)",
            )
    if off_axis:  # one legend entry says what the triangles are
        ax.plot([], [], "v", color="gray", label="at or below 0 (off the log axis)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log" if log_axis else "linear")
    ax.set_xlim(min(ks) / 1.25, max(ks) * 1.25)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("group size K")
    ax.set_ylabel(y_label)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    crowded = len(ax.get_legend_handles_labels()[1]) > 6
    ax.legend(fontsize=7 if crowded else 8, ncol=2 if crowded else 1)


def below_zero_note(ks: list, means: list) -> str:
    """The legend's mark of the K where an MSE estimate is below 0 (an unbiased estimate of a quantity >= 0 that
    too few prompts pushed below it), e.g. " (below 0 at K=2, 4: unreliable)"; "" when there is none."""
    below = [str(k) for k, v in zip(ks, means) if v < 0]
    return f" (below 0 at K={', '.join(below)}: unreliable)" if below else ""


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
