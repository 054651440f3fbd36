"""A map of the advisor's K* across settings: each run_tracecov.py main JSON (one setting each) -> one row.

Per setting: prompts, mean V, c1, c3 and the exact K* = 1 + sqrt(c3/c1) with its joint-bootstrap 95% interval
(``group_size_advisor`` in the run's JSON); the widest pair of settings is the one with the largest ratio of
K* whose intervals do not overlap. Writes a JSON and a figure (K* with its interval per setting).
"""

import itertools
import math
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import read_json, write_json


@dataclass(kw_only=True)
class KMapConfig(Flags):
    """The runs to map, their labels, and where the JSON and figure go."""

    runs: list[str] = option(nargs="+", help="main JSON files of run_tracecov.py, one per setting")
    labels: list[str] = option(nargs="+", help="one label per run (the setting)")
    out: str = option(help="output JSON file (replaced if it exists); the figure is written beside it (.png)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.labels) == len(self.runs), "--labels needs one label per --runs file")
        require(self.out.endswith(".json"), f"--out {self.out} must end with .json")
        cli.writable_file(self.out, "--out")


def setting_row(label: str, result: dict) -> dict:
    """One setting's advisor numbers (None where the advisor left them undefined)."""
    advice = result["group_size_advisor"]
    pooled, ci = advice["pooled"], advice.get("ci95", {})

    def number(value):
        return value if isinstance(value, (int, float)) and math.isfinite(value) else None

    n_prompts = result["n_prompts"]
    return {
        "setting": label,
        "prompts": max(n_prompts) if isinstance(n_prompts, list) else n_prompts,
        "mean_V": result.get("mean_V_oracle"),
        "c1": number(pooled.get("c1")),
        "c3": number(pooled.get("c3")),
        "K_star": number(pooled.get("K_star_exact")),
        "K_star_ci95": ci.get("K_star_exact"),
    }


def widest_pair(rows: list[dict]) -> dict | None:
    """The pair of settings with the largest K* ratio among pairs whose 95% intervals do not overlap."""
    best = None
    for a, b in itertools.combinations([r for r in rows if r["K_star"] and r["K_star_ci95"]], 2):
        low, high = sorted((a, b), key=lambda r: r["K_star"])
        if low["K_star_ci95"][1] < high["K_star_ci95"][0]:
            ratio = high["K_star"] / low["K_star"]
            if best is None or ratio > best["ratio"]:
                best = {"low": low["setting"], "high": high["setting"], "ratio": ratio}
    return best


def main(argv=None) -> None:
    args = KMapConfig.from_argv(argv, description=__doc__)
    results = [read_json(path, ("group_size_advisor", "n_prompts"), "run_tracecov.py main") for path in args.runs]
    rows = [setting_row(label, result) for label, result in zip(args.labels, results)]
    summary = {"settings": rows, "widest_separated_pair": widest_pair(rows), "runs": args.runs, "note": __doc__}
    write_json(args.out, summary)
    from grpo_mse.figures.tracecov import plt, save  # matplotlib loads after the inputs are read

    fig, ax = plt.subplots(figsize=(5.5, 0.6 * len(rows) + 1.5))
    for y, row in enumerate(rows):
        if row["K_star"] is None:
            continue
        low, high = row["K_star_ci95"] or (row["K_star"], row["K_star"])
        ax.errorbar([row["K_star"]], [y], xerr=[[row["K_star"] - low], [high - row["K_star"]]], marker="o", capsize=3)
    ax.set_yticks(range(len(rows)), [f"{r['setting']} (mean V {r['mean_V']:.2f})" for r in rows])
    ax.set_xlabel("advisor's K* = 1 + sqrt(c3/c1), joint-bootstrap 95% interval")
    ax.grid(True, alpha=0.3)
    for path in save(fig, args.out[: -len(".json")]):
        print(f"wrote {path}")
    print(f"wrote {args.out}; widest separated pair: {summary['widest_separated_pair']}")
