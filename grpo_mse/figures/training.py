"""Figure 5 (test accuracy against group size K at fixed budget) and Table 2 from the collected CSV.

Input: the long table of grpo_mse.training.logs (columns K, seed, step, metric, value). Bands and
intervals are 95% Student-t intervals of the mean over seeds; with a single seed there is none: the
figure draws no band and Table 2 writes "n/a" (not a zero-width "± 0.00").

  python -m grpo_mse.figures.training --csv results/training_runs.csv --out_dir results/figures
"""

from __future__ import annotations

import argparse
import math
import os
import re

from grpo_mse.tables.outputs import mean_t_interval

ACCURACY_METRIC = re.compile(r"^val-core/.*/(acc|reward)/mean@\d+$")


def pick_metric(frame, metric: str | None = None) -> str:
    """``metric`` if given, else the first ``val-core/.../acc/mean@N`` metric of the table."""
    metrics = sorted(frame["metric"].unique())
    if metric:
        if metric not in metrics:
            raise ValueError(f"metric {metric!r} not in the table; available: {', '.join(metrics)}")
        return metric
    matches = [m for m in metrics if ACCURACY_METRIC.match(m)] or [m for m in metrics if m.startswith("val-core/")]
    if not matches:
        raise ValueError("no val-core metric in the table; pass metric=... explicitly")
    return matches[0]


def default_steps(frame, n_steps: int = 4) -> list[int]:
    """Up to ``n_steps`` evenly spaced steps logged by every K, always including the last one."""
    per_k = [set(group["step"]) for _, group in frame.groupby("K")]
    common = sorted(set.intersection(*per_k)) if per_k else []
    if len(common) <= n_steps:
        return common
    picks = {common[round(i * (len(common) - 1) / (n_steps - 1))] for i in range(n_steps)}
    return sorted(picks)


def interval(values) -> tuple[float, float | None]:
    """(mean, 95% t half-width over seeds); the half-width is None for a single value (no interval)."""
    mean, half = mean_t_interval(values)
    return mean, (half if len(values) > 1 else None)


def accuracy_by_k(frame, metric: str, step: int):
    """Rows ``(K, mean, half_width or None, n_seeds)`` of ``metric`` at ``step``."""
    sub = frame[(frame["metric"] == metric) & (frame["step"] == step)]
    return [(int(k), *interval(list(group["value"])), len(group)) for k, group in sorted(sub.groupby("K"))]


def pm(mean: float, half: float | None, digits: int = 2) -> str:
    """``mean ± half``, or ``mean ± n/a`` when there is no interval (one seed)."""
    return f"{mean:.{digits}f} ± " + ("n/a" if half is None else f"{half:.{digits}f}")


def plot_figure5(frame, out_path: str, metric: str | None = None, steps=None, title: str | None = None) -> list[str]:
    """Test accuracy against K (log2 axis) at several steps, mean and 95% band; writes PNG and PDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = pick_metric(frame, metric)
    sub = frame[frame["metric"] == metric]
    steps = list(steps) if steps else default_steps(sub)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for step in steps:
        rows = accuracy_by_k(sub, metric, step)
        if not rows:
            continue
        ks, means, hws, _ = zip(*rows)
        (line,) = ax.plot(ks, means, marker="o", label=f"step {step}")
        if all(h is not None for h in hws):  # no band where a K has one seed
            ax.fill_between(
                ks,
                [m - h for m, h in zip(means, hws)],
                [m + h for m, h in zip(means, hws)],
                color=line.get_color(),
                alpha=0.2,
            )
    all_k = sorted(int(k) for k in sub["K"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(all_k, [str(k) for k in all_k])
    ax.set_xlabel("group size K (fixed budget)")
    ax.set_ylabel(f"test accuracy\n({metric})")
    ax.set_title(title or "Test accuracy against group size")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    stem = os.path.splitext(out_path)[0]
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    paths = [f"{stem}.png", f"{stem}.pdf"]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths


def table2(frame, metric: str | None = None, percent: bool = True) -> str:
    """Markdown table per K: seeds, final and best accuracy (mean +- 95% CI over seeds); best final in bold."""
    metric = pick_metric(frame, metric)
    sub = frame[frame["metric"] == metric].sort_values("step")
    scale, unit = (100.0, " (%)") if percent else (1.0, "")
    rows = []
    for k, group in sorted(sub.groupby("K")):
        per_seed = group.groupby("seed")["value"]
        final, best = interval(list(per_seed.last() * scale)), interval(list(per_seed.max() * scale))
        rows.append((int(k), group["seed"].nunique(), final, best))
    top = max(rows, key=lambda r: r[2][0])[0] if rows else None
    lines = [
        f"Metric: `{metric}`",
        "",
        f"| K | seeds | final accuracy{unit} | best accuracy{unit} |",
        "|---:|---:|---:|---:|",
    ]
    for k, n, (fm, fh), (bm, bh) in rows:
        final_text = pm(fm, fh)
        lines.append(f"| {k} | {n} | {f'**{final_text}**' if k == top else final_text} | {pm(bm, bh)} |")
    if any(n == 1 for _, n, _, _ in rows):
        lines += ["", "n/a: one seed, no interval."]
    return "\n".join(lines) + "\n"


COLUMNS = ("K", "seed", "step", "metric", "value")


def read_training(path: str, metric: str | None = None):
    """The collected table at ``path``, checked: it exists, has the columns and rows, and holds ``metric``
    (or a default accuracy metric). Problems are one-line DataErrors."""
    import pandas as pd

    from grpo_mse.tables.inputs import DataError

    if not os.path.isfile(path):
        raise DataError(f"training CSV not found: {path}")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not a readable CSV ({str(error).splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing or frame.empty:
        raise DataError(
            f"{path}: "
            + (f"no {', '.join(missing)} column" if missing else "no rows")
            + " (expected the CSV of Policy_Optimization/collect_runs.py)"
        )
    for column in ("K", "seed", "step", "value"):
        numbers = pd.to_numeric(frame[column], errors="coerce")
        finite = numbers.abs() < math.inf  # False for NaN (not a number) and for infinities
        whole = finite & ((numbers == numbers.round()) if column != "value" else True)
        if not whole.all():
            row = int((~whole).to_numpy().nonzero()[0][0])
            kind = "a finite number" if column == "value" else "a whole number"
            raise DataError(
                f"{path} row {row + 2}: {column} {str(frame[column].iloc[row])!r} is not {kind} "
                "(expected the CSV of Policy_Optimization/collect_runs.py)"
            )
        frame[column] = numbers if column == "value" else numbers.astype(int)
    try:
        pick_metric(frame, metric)
    except ValueError as error:
        raise DataError(f"{path}: {error}") from None
    return frame


def main_training(args=None, frame=None) -> dict:
    """Figure 5 (PNG+PDF) and Table 2 (markdown) from a collected CSV; ``args`` as from ``parse_args``."""
    args = parse_args(args) if args is None or isinstance(args, list) else args
    frame = read_training(args.csv, args.metric) if frame is None else frame
    figure = plot_figure5(frame, os.path.join(args.out_dir, args.name), args.metric, args.steps)
    table_path = os.path.join(args.out_dir, f"{args.name}_table.md")
    with open(table_path, "w", encoding="utf-8") as f:
        f.write(table2(frame, args.metric))
    for path in [*figure, table_path]:
        print(f"wrote {path}")
    return {"figure": figure, "table": table_path}


def parse_args(argv=None) -> argparse.Namespace:
    from grpo_mse import cli

    p = cli.ArgumentParser(description="Figure 5 and Table 2 from collected training runs")
    p.add_argument("--csv", required=True, help="CSV written by Policy_Optimization/collect_runs.py")
    p.add_argument("--out_dir", default="results/figures", help="output folder")
    p.add_argument("--name", default="figure5_accuracy_vs_K", help="file stem of the outputs")
    p.add_argument("--metric", default=None, help="default: the first val-core/.../acc/mean@N metric")
    p.add_argument(
        "--steps", type=cli.integer(minimum=0), nargs="*", default=None, help="default: four steps incl. the last"
    )
    args = p.parse_args(argv)
    cli.writable_dir(args.out_dir, "--out_dir")
    return args


if __name__ == "__main__":
    from grpo_mse import cli

    cli.run(main_training)
