"""Figure 5 (test accuracy against group size K at fixed budget) and Table 2 from the collected CSV.

Input: the long table of grpo_mse.training.logs (columns K, seed, step, metric, value, budget, lr, trainer,
status). Every K is compared at one common step S: the last step every included run logged the metric, or the
largest of ``--steps``. Included runs: complete ones and those whose completeness was not recorded (footnoted);
interrupted, failed and truncated runs are left out and listed unless ``include_incomplete`` (then footnoted), and
so are runs that did not log the metric at a drawn step. A table with runs at several budgets, learning rates or
trainers is refused. Bands and intervals are 95% Student-t intervals of the mean over seeds; with a single seed
there is none: the figure draws no band and Table 2 writes "n/a" (not a zero-width "± 0.00"). The table is read
and the runs chosen by grpo_mse.training.runs_table.

  python -m grpo_mse.figures.training --csv results/training_runs.csv --out_dir results/figures
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.training.runs_table import interval, pm, read_training, select_runs


def accuracy_by_k(frame, metric: str, step: int):
    """Rows ``(K, mean, half_width or None, n_seeds)`` of ``metric`` at ``step``."""
    sub = frame[(frame["metric"] == metric) & (frame["step"] == step)]
    return [(int(k), *interval(list(group["value"])), len(group)) for k, group in sorted(sub.groupby("K"))]


def plot_figure5(frame, out_path: str, metric: str | None = None, steps=None, include_incomplete=False) -> list[str]:
    """Test accuracy against K (log2 axis) at several steps, mean and 95% band over the runs of ``select_runs``;
    writes PNG and PDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = select_runs(frame, metric, steps, include_incomplete)
    metric, sub, steps = chosen.metric, chosen.frame, chosen.steps
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
    ax.set_title("Test accuracy against group size")
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


def table2(frame, metric: str | None = None, percent: bool = True, steps=None, include_incomplete=False) -> str:
    """Markdown table per K over the runs of ``select_runs``: seeds, accuracy at the common step S and the best
    accuracy up to S (mean +- 95% CI over seeds); the best at S in bold; every run left out listed below."""
    chosen = select_runs(frame, metric, steps, include_incomplete)
    sub = chosen.frame[chosen.frame["step"] <= chosen.step]
    scale, unit = (100.0, " (%)") if percent else (1.0, "")
    flagged = {line.split(":")[0] for line in chosen.incomplete}
    rows = []
    for k, group in sorted(sub.groupby("K")):
        at_step = group[group["step"] == chosen.step].groupby("seed")["value"].first()
        best = group.groupby("seed")["value"].max()
        mark = "†" if any(label.startswith(f"K={k} ") for label in flagged) else ""
        rows.append((int(k), len(at_step), interval(list(at_step * scale)), interval(list(best * scale)), mark))
    best_mean = max(r[2][0] for r in rows)
    top = {r[0] for r in rows if r[2][0] == best_mean}  # every K of a tie in bold
    how = "the largest of --steps" if chosen.chosen else "the last step every included run reached"
    lines = [
        f"Metric: `{chosen.metric}`, at step {chosen.step} ({how}); best: the highest value up to that step.",
        "",
        f"| K | seeds | accuracy at step {chosen.step}{unit} | best up to step {chosen.step}{unit} |",
        "|---:|---:|---:|---:|",
    ]
    for k, n, (fm, fh), (bm, bh), mark in rows:
        final_text = pm(fm, fh)
        lines.append(f"| {k}{mark} | {n} | {f'**{final_text}**' if k in top else final_text} | {pm(bm, bh)} |")
    notes = []
    if any(n == 1 for _, n, _, _, _ in rows):
        notes.append("n/a: one seed, no interval.")
    if chosen.incomplete:
        notes.append(f"†: includes runs that did not complete (--include_incomplete): {'; '.join(chosen.incomplete)}.")
    if chosen.unrecorded and len(chosen.unrecorded) == sum(n for _, n, _, _, _ in rows):
        notes.append(
            "Completeness not recorded for any run (a CSV collected before the status column, or wandb folders "
            "without an exit code): all included."
        )
    elif chosen.unrecorded:
        notes.append(f"Completeness not recorded (included): {'; '.join(chosen.unrecorded)}.")
    if chosen.excluded:
        notes.append(f"Left out ({len(chosen.excluded)}): {'; '.join(chosen.excluded)}.")
    for note in notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"


@dataclass(kw_only=True)
class TrainingFiguresConfig(Flags):
    """The collected runs, the metric and steps to draw, and where Figure 5 and Table 2 go."""

    csv: str = option(help="CSV written by Policy_Optimization/collect_runs.py")
    out_dir: str = option("results/figures", help="output folder")
    name: str = option("figure5_accuracy_vs_K", help="file stem of the outputs")
    metric: str | None = option(None, help="default: the first val-core/.../acc/mean@N metric")
    steps: list[int] | None = option(
        None,
        nargs="*",
        minimum=0,
        help="Figure 5's steps; Table 2 compares K at the largest (default: the last step every run reached)",
    )
    include_incomplete: bool = option(
        False, help="include interrupted, failed and truncated runs (footnoted) instead of leaving them out"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.writable_dir(self.out_dir, "--out_dir")


def main_training(args: TrainingFiguresConfig | list[str] | None = None, frame=None) -> dict:
    """Figure 5 (PNG+PDF) and Table 2 (markdown) from a collected CSV (``frame``: the CSV already read)."""
    args = parse_args(args) if args is None or isinstance(args, list) else args
    frame = read_training(args.csv, args.metric) if frame is None else frame
    include = args.include_incomplete
    table = table2(frame, args.metric, steps=args.steps, include_incomplete=include)  # refusals before any file
    figure = plot_figure5(
        frame, os.path.join(args.out_dir, args.name), args.metric, args.steps, include_incomplete=include
    )
    table_path = os.path.join(args.out_dir, f"{args.name}_table.md")
    with open(table_path, "w", encoding="utf-8") as f:
        f.write(table)
    for path in [*figure, table_path]:
        print(f"wrote {path}")
    for line in select_runs(frame, args.metric, args.steps, include).excluded:
        print(f"left out: {line}")
    return {"figure": figure, "table": table_path}


def parse_args(argv=None) -> TrainingFiguresConfig:
    """The outputs to draw, from the command line (flags are TrainingFiguresConfig's fields)."""
    return TrainingFiguresConfig.from_argv(argv, description="Figure 5 and Table 2 from collected training runs")


if __name__ == "__main__":
    cli.run(main_training)
