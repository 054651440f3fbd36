"""The Assumption-2 diagnostic of several policies side by side (from scripts/explain_baseline.py's JSON files).

Per policy: the share of measured prompts where the oracle baseline helps (K (MSE_vanilla - MSE_oracle) > 0,
i.e. E[||s||^2 | G = 1] > E||s||^2 / 2), the mean over prompts of E[||s||^2 | G = 1] and of E||s||^2, and the
median over prompts of their ratio (Assumption 2 asks for about 1; the oracle baseline helps above 1/2).
"""

import statistics
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import read_json, write_atomic

COLUMNS = (
    "policy",
    "oracle helps on",
    "mean E‖s‖² given correct",
    "mean E‖s‖²",
    "median ratio correct / overall",
    "mean K (MSE_vanilla − MSE_oracle)",
)


@dataclass(kw_only=True)
class CompareBaselineConfig(Flags):
    """The diagnostics to put side by side, their labels, and where the markdown table goes."""

    diagnostics: list[str] = option(nargs="+", help="baseline_diagnostic.json files of explain_baseline.py")
    labels: list[str] = option(nargs="+", help="one label per file")
    out: str = option(help="output markdown file (replaced if it exists)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.labels) == len(self.diagnostics), "--labels needs one label per --diagnostics file")
        cli.writable_file(self.out, "--out")


def summary_row(label: str, diagnostic: dict) -> list[str]:
    """One table row from an explain_baseline summary (prompts without a correct sample are left out of the
    correct-answer columns)."""
    rows = diagnostic["per_prompt"]
    measured = [r for r in rows if isinstance(r["E_norm2_given_correct"], (int, float)) and r["E_norm2"] > 0]
    measured = [r for r in measured if r["E_norm2_given_correct"] == r["E_norm2_given_correct"]]  # not nan
    right = statistics.fmean(r["E_norm2_given_correct"] for r in measured) if measured else float("nan")
    ratio = statistics.median(r["E_norm2_given_correct"] / r["E_norm2"] for r in measured) if measured else float("nan")
    return [
        label,
        f"{diagnostic['oracle_helps_on']} / {diagnostic['prompts']}",
        f"{right:.1f}",
        f"{statistics.fmean(r['E_norm2'] for r in rows):.1f}",
        f"{ratio:.2f}",
        f"{diagnostic['mean_K_times_vanilla_minus_oracle']:.1f}",
    ]


def table(labels: list[str], diagnostics: list[dict]) -> str:
    """A markdown table, one row per policy."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(summary_row(label, d)) + " |" for label, d in zip(labels, diagnostics)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = CompareBaselineConfig.from_argv(argv, description=__doc__)
    wanted = ("per_prompt", "oracle_helps_on", "prompts", "mean_K_times_vanilla_minus_oracle")
    diagnostics = [read_json(path, wanted, "explain_baseline.py") for path in args.diagnostics]
    text = table(args.labels, diagnostics)
    write_atomic(args.out, text.encode())
    print(text + f"-> {args.out}")
