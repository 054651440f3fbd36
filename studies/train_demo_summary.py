"""Start and end held-out accuracy of a group-size sweep, per K and pooled, with 95% intervals over seeds.

  python -m studies.train_demo_summary results/training_demo/training_runs.csv [--out summary.md]

Per run: the accuracy at its first logged step and at the common step of Figure 5 and Table 2 (the last step
every included run reached; grpo_mse.training.runs_table.select_runs, which also leaves out runs that did not
complete), and the change (paired by run). Intervals are Student-t intervals of the mean over seeds
(grpo_mse.tables.outputs.mean_t_interval).
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_atomic
from grpo_mse.training.runs_table import interval, pm, read_training, select_runs


def run_table(frame, step: int):
    """One row per (K, seed) of ``frame`` (one metric): accuracy at the first step and at ``step``."""
    sub = frame[frame["step"] <= step].sort_values("step")
    grouped = sub.groupby(["K", "seed"])["value"]
    runs = grouped.first().rename("start").to_frame().join(grouped.last().rename("end"))
    runs["change"] = runs["end"] - runs["start"]
    return runs.reset_index()


def summary(frame, metric: str | None = None) -> str:
    """Markdown: start, end and change (mean ± 95% CI over seeds) per K and over all runs; best K by end accuracy."""
    chosen = select_runs(frame, metric)
    metric, runs = chosen.metric, run_table(chosen.frame, chosen.step)
    lines = [
        f"Metric: `{metric}` (held-out, greedy); end: step {chosen.step}, the last step every included run reached",
        "",
        "| K | runs | start | end | change |",
        "|---:|---:|---:|---:|---:|",
    ]

    def cell(values):
        return pm(*interval(list(values)), digits=3)

    def row(label, group):
        return f"| {label} | {len(group)} | {cell(group['start'])} | {cell(group['end'])} | {cell(group['change'])} |"

    best = None
    for k, group in runs.groupby("K"):
        lines.append(row(k, group))
        mean, half = interval(list(group["end"]))
        if best is None or mean > best[1]:
            best = (int(k), mean, half)
    lines.append(row("all", runs))
    if best is not None:
        lines += ["", f"Best K by end accuracy: K = {best[0]} ({pm(best[1], best[2], digits=3)})."]
    if (runs.groupby("K").size() == 1).any():
        lines += ["", "n/a: one seed, no interval."]
    if chosen.excluded:
        lines += ["", f"Left out ({len(chosen.excluded)}): {'; '.join(chosen.excluded)}."]
    return "\n".join(lines) + "\n"


@dataclass(kw_only=True)
class DemoSummaryConfig(Flags):
    """The collected runs to summarise, the metric, and where the markdown goes."""

    csv: str = option(help="CSV written by Policy_Optimization/collect_runs.py", positional=True)
    metric: str | None = option(None, help="default: the first val-core/.../acc/mean@N metric")
    out: str | None = option(None, help="also write the markdown here")


def main(argv=None) -> None:
    args = DemoSummaryConfig.from_argv(argv, description=__doc__)
    text = summary(read_training(args.csv, args.metric), args.metric)
    print(text, end="")
    if args.out:
        write_atomic(args.out, text)


if __name__ == "__main__":
    cli.run(main)
