"""The README's real-LLM sentences quote the committed runs (the Qwen powered Figure-4 run, SmolLM2's training): its
ratios and intervals, rounded to 2 decimals, are those of the saved JSON files (a rerun or a hand edit that leaves
the README stale fails here)."""

from __future__ import annotations

import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POST_TRAINED = "results/real_llm/post_trained_v3/figure4/tracecov_smollm2_arith_lora_v3_20261203_200057.json"
POWERED = "results/real_llm/qwen_coder_05b/powered"  # the powered Figure-4 runs (protocol: its README.md)
QWEN = f"{POWERED}/zero_shot/tracecov_Qwen2.5_Coder_0.5B_Instruct_AWQ.Q4_K_M_20261207_072632.json"
QWEN_FEW_SHOT = f"{POWERED}/few_shot/tracecov_Qwen2.5_Coder_0.5B_Instruct_AWQ.Q4_K_M_20261207_123332.json"
TRAINING_SUMMARY = "results/real_llm/post_trained_v3/training/summary.md"
NUMBER = r"(-?\d+\.\d+)"
CELL = rf"{NUMBER} \[{NUMBER}, {NUMBER}\]"


def readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return " ".join(handle.read().split())  # one line: the sentence wraps


def quoted_cells(text: str, label: str, count: int) -> list[tuple[float, float, float]]:
    """The ``count`` cells "a [b, c]" after ``label`` in ``text`` (comma-separated, as the README writes them)."""
    match = re.search(re.escape(label) + " " + ", ".join([CELL] * count), text)
    assert match, f"README: no '{label}' followed by {count} cells"
    values = [float(v) for v in match.groups()]
    return [tuple(values[i : i + 3]) for i in range(0, len(values), 3)]


def saved_cells(path: str, ratio: str) -> list[tuple[float, float, float]]:
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        cells = json.load(handle)["paired"]["ratio"][ratio]
    return [(round(c["estimate"], 2), round(c["ci95"][0], 2), round(c["ci95"][1], 2)) for c in cells]


@pytest.mark.parametrize(
    "label,ratio",
    [("GRPO/oracle", "grpo/oracleV"), ("vanilla/oracle", "naive/oracleV"), ("vanilla/GRPO", "naive/grpo")],
)
def test_the_real_llm_ratios_are_the_committed_runs(label, ratio):
    zero_shot = readme()[readme().index("Its powered run (120 prompts") :]
    assert quoted_cells(zero_shot, label, 3) == saved_cells(QWEN, ratio)
    few_shot = readme()[readme().index("The few-shot row (120 prompts") :]
    assert quoted_cells(few_shot, label, 3) == saved_cells(QWEN_FEW_SHOT, ratio)


def test_the_real_llm_training_change_is_the_committed_summary():
    with open(os.path.join(ROOT, TRAINING_SUMMARY), encoding="utf-8") as handle:
        (row,) = [line for line in handle if line.startswith("| all |")]
    start, end, change = (cell.split(" ± ")[0] for cell in row.strip("| \n").split(" | ")[2:5])
    change_half = row.strip("| \n").split(" | ")[4].split(" ± ")[1]
    assert f"{start} -> {end}, change {float(change):+.3f} +- {change_half}" in readme()


def test_the_check_sees_a_stale_number():
    text = "GRPO/oracle 1.38 [1.16, 1.60], 1.22 [1.12, 1.32], 1.08 [0.96, 1.20]"
    assert quoted_cells(text, "GRPO/oracle", 3) != saved_cells(POST_TRAINED, "grpo/oracleV")
