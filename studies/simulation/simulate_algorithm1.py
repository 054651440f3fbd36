"""Algorithm 1 on CPU: SGD (or, with --optimizer adamw, AdamW) ascent with the vanilla, GRPO or oracle-baseline
estimator at a fixed budget N = B*K sequences per step, swept over the group size K; final held-out expected
reward (or, with --heldout_greedy, greedy accuracy) against K.

The oracle baseline V_theta(x) is a noisy Monte Carlo estimate from n_v extra samples per prompt at the
current policy (independent of the K samples, so unbiased; NOT counted in N), or with --oracle running
a per-prompt running average of earlier rewards (free, stale, still unbiased).

Example:
    python scripts/simulate_algorithm1.py --model assets/tiny_policy \\
        --advisor_json results/demo/tracecov_*[0-9].json
Outputs (in --out_dir): algorithm1.csv (K, seed, estimator, step, heldout_reward),
algorithm1_summary.json, algorithm1.png and algorithm1.pdf.
"""

import glob
import math
import os
import time
from dataclasses import asdict, dataclass

from grpo_mse import cli
from grpo_mse.flags import option
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.tables.outputs import write_csv, write_json
from studies.command_line import protect_tracked
from studies.simulation.config import SimulationConfig
from studies.simulation.records import SIMULATION_COLUMNS, SimulationRecord


@dataclass
class Args(SimulationConfig):
    """The simulation's settings plus where the results go and what an earlier run or tracecov run supplies."""

    threads: int = option(1, minimum=1, help="torch.set_num_threads (1 is fastest here)")
    out_dir: str = option("results/simulation", help="output folder")
    overwrite: bool = option(False, help="replace files tracked by git (the committed results/simulation) in --out_dir")
    records_csv: str | None = option(
        None,
        help="summarise this earlier algorithm1.csv (same settings) instead of "
        "running the SGD sweep again: the runs do not depend on the advisor, "
        "only the summary does",
    )
    advisor_json: list[str] | None = option(
        None, nargs="*", help="tracecov results JSON with group_size_advisor (K* measured at the starting policy)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.writable_dir(self.out_dir, "--out_dir")
        protect_tracked(self.out_dir, self.overwrite, "--out_dir")
        check_model_path(self.model)


def parse_args(argv=None) -> Args:
    """The run's settings from the command line (flags are Args' fields)."""
    return Args.from_argv(argv, description=__doc__)


def advisor_path(patterns) -> str | None:
    """The newest file matching the --advisor_json arguments (shell globs expanded here too), or None."""
    paths = sorted(
        {p for pattern in patterns or [] for p in (glob.glob(pattern) or [pattern]) if os.path.isfile(p)},
        key=os.path.getmtime,
    )
    return paths[-1] if paths else None


def oracle_note(args) -> str:
    """How the oracle baseline was approximated and what that costs."""
    if args.oracle == "mc":
        return (
            f"oracleV uses a noisy oracle: V_theta(x) estimated at the current policy from n_v={args.n_v} extra "
            f"samples per prompt, independent of the K samples (the estimate stays unbiased); these "
            f"{args.n_v}*B extra sequences per step are not counted in the budget N={args.budget}."
        )
    return (
        "oracleV uses a per-prompt running average of rewards from earlier visits (stale but fixed before the "
        "draw, so the estimate stays unbiased; no extra samples)."
    )


def optimizer_label(args) -> str:
    """The optimiser in words: plain SGD, or AdamW with its settings."""
    if args.optimizer == "sgd":
        return "plain SGD"
    clip = f"gradient norm clipped to {args.max_grad_norm}" if args.max_grad_norm > 0 else "no clipping"
    return f"AdamW (weight decay {args.weight_decay}, {clip})"


def metric_label(args) -> str:
    """What the held-out number is."""
    if args.heldout_greedy:
        return f"held-out greedy accuracy ({args.heldout_prompts} prompts, one greedy continuation each)"
    return f"held-out expected reward ({args.heldout_prompts} prompts x {args.heldout_samples} samples, fixed streams)"


def build_note(summary: dict, args) -> str:
    """One paragraph: what was run, the agreement statement and its caveats."""
    parts = [
        f"Algorithm 1 ({optimizer_label(args)}, lr={args.lr}, {args.steps} steps, N=B*K={args.budget} sequences "
        f"per step, seeds {list(args.seeds)}); final reward = {metric_label(args)}, 95% CI over seeds "
        f"(Student t); paired differences between estimators are taken at the same (K, seed), whose runs share "
        f"random streams; {summary['learning']}.",
        oracle_note(args),
        summary["agreement"]["statement"] + ".",
    ]
    if summary["learning"].startswith("no measurable learning"):
        parts.append(
            "No run improved on the starting policy, so the best K is the group size whose gradient noise "
            "hurt least, not the one that learned most."
        )
    if summary["advisor"]:
        parts.append(
            "K* = 1 + sqrt(c3/c1) minimises the exact GRPO gradient error c1 K/N + c2/N + c3/(N(K-1)) at the "
            "starting policy "
            "(sampling settings of the advisor run may differ); the best K after training also depends "
            "on lr, the number of steps and the policy's drift, so agreement is a check, not a proof."
        )
    else:
        parts.append("No advisor JSON given: K* not compared.")
    return " ".join(parts)


def plot_summary(
    summary: dict, K_list, title: str, stem: str, ylabel: str = "final held-out expected reward"
) -> list[str]:
    """Two panels against K: the final held-out metric per estimator, and the paired differences between them."""
    from grpo_mse.figures.tracecov import plt, save

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.2), gridspec_kw={"wspace": 0.3})
    draw_final_panel(left, summary, K_list, ylabel)
    draw_paired_panel(right, summary, K_list)
    fig.suptitle(title, fontsize=9)
    return save(fig, stem, formats=("png", "pdf"))


def log2_k_axis(ax, K_list) -> None:
    """log2 K axis with the grid's K as ticks, and a light grid."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(K_list), [str(k) for k in K_list])
    ax.set_xlabel("group size K (B = N / K prompts per step)")
    ax.grid(True, which="both", alpha=0.3)


def draw_final_panel(ax, summary: dict, K_list, ylabel: str) -> None:
    """Final held-out metric against K, one line per estimator with its 95% band over seeds; K* dashed."""
    from grpo_mse.figures.tracecov import style
    from studies.simulation import summary as sim

    for name, by_k in summary["final_reward"].items():
        ks = [int(k) for k in by_k]
        mean = [by_k[str(k)]["mean"] for k in ks]
        half = [sim.half_width(by_k[str(k)]) for k in ks]
        ax.plot(ks, mean, marker="o", **style(name))
        ax.fill_between(
            ks,
            [m - h for m, h in zip(mean, half)],
            [m + h for m, h in zip(mean, half)],
            color=style(name)["color"],
            alpha=0.15,
        )
    ax.axhline(summary["initial_reward"], color="gray", linestyle=":", label="starting policy")
    advisor = summary["advisor"]
    if advisor and advisor.get("K_star"):
        ax.axvline(
            advisor["K_star"],
            color="tab:red",
            linestyle="--",
            label=f"advisor K* = 1+sqrt(c3/c1) = {advisor['K_star']:.3g}",
        )
        from grpo_mse.analysis.error_model import interval_of  # numpy loads only when a figure is drawn

        low, high = interval_of(advisor.get("K_star_ci95")) or (math.nan, math.nan)
        if math.isfinite(low):
            ax.axvspan(low, min(high, max(K_list)), color="tab:red", alpha=0.08, label="K* 95% interval")
    log2_k_axis(ax, K_list)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def draw_paired_panel(ax, summary: dict, K_list) -> None:
    """Paired differences a - b of the final metric at the same (K, seed) against K, 95% t error bars."""
    from studies.simulation import summary as sim

    pairs = summary.get("paired_differences", {})
    for shift, (pair, by_k) in zip((0.94, 1.0, 1.06), pairs.items()):
        ks = [int(k) for k in by_k]
        ax.errorbar(
            [k * shift for k in ks],
            [by_k[str(k)]["mean"] for k in ks],
            yerr=[sim.half_width(by_k[str(k)]) for k in ks],
            marker="o",
            capsize=3,
            label=pair,
        )
    ax.axhline(0.0, color="gray", linestyle=":")
    log2_k_axis(ax, K_list)
    ax.set_ylabel("paired difference, final metric")
    ax.set_title("a - b at the same (K, seed): shared random streams", fontsize=9)
    if pairs:
        ax.legend(fontsize=8)


def run(args) -> dict:
    """Run the sweep with a progress bar; return {"records", "wall_s"}."""
    import torch
    from tqdm import tqdm

    from studies.simulation.run import SimulationRun

    torch.set_num_threads(args.threads)
    config = args
    for K in config.K_list:
        config.batch(K)
    run = SimulationRun.load(config)
    total = len(config.K_list) * len(config.seeds) * len(config.estimators) * config.steps
    start = time.perf_counter()
    with tqdm(total=total, desc=f"{config.optimizer} steps", unit="step") as bar:
        records = run.sweep(progress=bar.update)
    return {"records": records, "wall_s": time.perf_counter() - start}


def read_records(path: str) -> dict:
    """{"records", "wall_s"} from an algorithm1.csv (wall_s of its summary JSON next to it, if any)."""
    import csv
    import json

    with open(path, encoding="utf-8") as handle:
        records = [
            SimulationRecord.from_csv(r, f"{path}: row {number}") for number, r in enumerate(csv.DictReader(handle), 1)
        ]
    summary = os.path.join(os.path.dirname(path), "algorithm1_summary.json")
    wall = json.load(open(summary, encoding="utf-8")).get("wall_s") if os.path.exists(summary) else None
    return {"records": records, "wall_s": wall if wall is not None else float("nan")}


def main(argv=None) -> dict:
    args = parse_args(argv)
    from studies.simulation import summary as sim  # torch loads after the flags are checked

    path = advisor_path(args.advisor_json)
    if args.advisor_json and path is None:
        print(f"advisor JSON not found: {' '.join(args.advisor_json)}; K* not compared")
    advisor = sim.read_advisor(path) if path else None
    outcome = read_records(args.records_csv) if args.records_csv else run(args)
    summary = sim.summarize(outcome["records"], args.K_list, advisor).to_json()
    summary["metric"] = metric_label(args)
    summary["note"] = build_note(summary, args)
    summary["config"] = {**asdict(args), "advisor_json": path}
    summary["wall_s"] = round(outcome["wall_s"], 1)
    os.makedirs(args.out_dir, exist_ok=True)
    records = [r.to_json() for r in outcome["records"]]
    write_csv(os.path.join(args.out_dir, "algorithm1.csv"), records, SIMULATION_COLUMNS)
    write_json(os.path.join(args.out_dir, "algorithm1_summary.json"), summary)
    title = (
        f"Algorithm 1: N={args.budget}, {args.steps} {'SGD' if args.optimizer == 'sgd' else 'AdamW'} steps, "
        f"lr={args.lr}, {len(args.seeds)} seeds"
    )
    ylabel = "final held-out greedy accuracy" if args.heldout_greedy else "final held-out expected reward"
    plot_summary(summary, args.K_list, title, os.path.join(args.out_dir, "algorithm1"), ylabel)
    print_summary(summary)
    return summary


def print_summary(summary: dict) -> None:
    """Final reward per estimator and K, best K and the K* statement."""
    from studies.simulation import summary as sim

    print(f"starting policy: held-out reward {summary['initial_reward']:.4f}; wall {summary['wall_s']} s")
    for name, by_k in summary["final_reward"].items():
        cells = "  ".join(f"K={k}: {s['mean']:.4f}+-{sim.half_width(s):.4f}" for k, s in by_k.items())
        print(f"{name:8s} {cells}  best K={summary['best_K'][name]}")
    for pair, by_k in summary["paired_differences"].items():
        cells = "  ".join(f"K={k}: {s['mean']:+.4f}+-{sim.half_width(s):.4f}" for k, s in by_k.items())
        print(f"{pair} (paired): {cells}")
    print(summary["learning"])
    print(summary["agreement"]["statement"])
