"""Property-based tests (Hypothesis, derandomized): generated tables, flag values and paper CSVs hold one invariant.

Invariant for every generated case: either the command goes on (exit 0 with correct outputs; in-process the
validation layer passes and the run reaches the model), or it stops with exit 2 and exactly one ``error:``
line that names the input, no traceback, nothing written in its output folder and no tracked file changed.

In-process cases call the scripts' own ``main(argv)`` under ``cli.run``'s boundary (stderr captured); the
model load (or the run) is replaced by a sentinel, so a case costs milliseconds.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from unittest import mock

from conftest import BUILTIN_POLICY, bounded
from hypothesis import given
from hypothesis import strategies as st
from one_line_checks import (  # noqa: F401 (autouse fixture)
    FIGURES,
    GOOD_PROMPT,
    boundary,
    no_tracked_change,
    one_error_line,
    tiny_tracecov_argv,
    write_table,
)

from grpo_mse.commands import oracle as oracle_command
from grpo_mse.commands import tracecov as tracecov_command

TRACECOV = tracecov_command
ORACLE = oracle_command
COUNTS: dict[str, int] = {}  # generated cases per property (docs/safety.md quotes them)


class Reached(Exception):
    """The run got past every input check (raised instead of loading the model)."""


# ---- generated table rows -------------------------------------------------------------------------------------

# (value, valid?) pools: the expected verdict is written down here, independently of the code under test.
PROMPTS = [
    (GOOD_PROMPT, True),
    ("  ", False),
    ("", False),
    (7, False),
    (None, False),
    (3.5, False),
    ([], False),
    ([{"role": "user", "content": "2 + 3 = ?"}], True),
    ([{"content": "2 + 3"}], False),
    ([{"role": "user", "content": 5}], False),
    ([{"role": "user", "content": " "}], False),
    (["text"], False),
    ({"role": "user", "content": "2 + 3 ="}, True),
    ("数学 2 + 3 = \u202e", True),
    (True, False),
    ("2 +\u2028 3 =\r", True),
]
GOLDS = [
    (5, True),
    (-12, True),
    (3.0, True),
    (2.5, False),
    (float("nan"), False),
    (float("inf"), False),
    (" 42 ", True),
    ("1,234", True),
    ("abc", False),
    ("", False),
    ("#### 72", False),
    (None, False),
    ([5], False),
    (True, False),
    (10**30, True),
    ("٣", True),
]
VALUES = [
    (0.5, True),
    (0, True),
    (1, True),
    (1.0000001, False),
    (-0.0, True),
    (float("nan"), False),
    (float("inf"), False),
    ("0.5", False),
    (None, False),
    (True, False),
    (2, False),
]
IDS = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.text(max_size=3), st.floats(allow_nan=True), st.booleans())
EXTRA = st.dictionaries(
    st.text(min_size=1, max_size=5).filter(
        lambda k: k not in {"prompt", "ground_truth", "V_oracle", "id", "data_source", "reward_model", "extra_info"}
    ),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.none()),
    max_size=2,
)


@st.composite
def tables(draw):
    """(rows, valid?): 1-3 rows; each field drawn from its pool, sometimes missing; ids repeat or are odd."""
    rows, valid = [], True
    for _ in range(draw(st.integers(1, 3))):
        row = dict(draw(EXTRA))
        for name, pool in (("prompt", PROMPTS), ("ground_truth", GOLDS), ("V_oracle", VALUES)):
            if draw(st.integers(0, 9)) == 0:  # missing field
                valid = False
                continue
            value, ok = draw(st.sampled_from(pool))
            row[name], valid = value, valid and ok
        if draw(st.booleans()):
            row["id"] = draw(IDS)
        rows.append(row)
    return rows, valid


@bounded(120)
@given(tables(), st.sampled_from(["jsonl", "json"]))
def test_generated_tables_are_run_or_refused_in_one_line(case, form):
    rows, valid = case
    COUNTS["tables"] = COUNTS.get("tables", 0) + 1
    with tempfile.TemporaryDirectory() as folder, mock.patch("grpo_mse.runs.tracecov.load_policy", side_effect=Reached):
        table, out = write_table(folder, rows, form), os.path.join(folder, "out")
        try:
            code, stderr = boundary(TRACECOV.main, tiny_tracecov_argv(table, out))
        except Reached:
            code, stderr = None, ""
        assert (code is None) == valid, (rows, code, stderr)
        if not valid:
            assert code == 2
            one_error_line(stderr, table)
        assert not os.path.exists(out)  # nothing is written before the model loads


# ---- generated flag values ------------------------------------------------------------------------------------


def text_of(value) -> str:
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


NUMBERS = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "", "abc", "0x10", "1_000", "٣"]),
)
INT_FLAGS = {"--T": 1, "--M": 2, "--c1_batch": 2, "--max_new_tokens": 1, "--gen_bs": 1}


def parse_int(text: str):
    try:
        return int(text)
    except ValueError:
        return None


def parse_float(text: str):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def flag_ok(flag: str, text: str) -> bool:
    """The documented range of each flag (docs/safety.md), written independently of the config code."""
    if flag in INT_FLAGS:
        value = parse_int(text)
        return value is not None and value >= INT_FLAGS[flag]
    if flag == "--seed":
        value = parse_int(text)
        return value is not None and 0 <= value <= 2**32 - 1
    if flag == "--budget":
        value = parse_int(text)
        return value is not None and value >= 2 and value % 2 == 0
    value = parse_float(text)
    if flag == "--temperature":
        return value is not None and 0.01 <= value <= 100
    return value is not None and 0 < value <= 1  # --top_p


@bounded(150)
@given(
    st.sampled_from([*INT_FLAGS, "--seed", "--budget", "--temperature", "--top_p"]),
    NUMBERS,
    st.sampled_from(["tracecov", "oracle"]),
)
def test_generated_flag_values_are_run_or_refused_in_one_line(flag, value, script):
    if script == "oracle" and flag not in ("--seed", "--temperature", "--top_p", "--max_new_tokens"):
        flag = "--seed"
    text = text_of(value)
    COUNTS["flags"] = COUNTS.get("flags", 0) + 1
    with tempfile.TemporaryDirectory() as folder:
        table = write_table(folder, [{"id": 0, "prompt": GOOD_PROMPT, "ground_truth": 5, "V_oracle": 0.5}], "jsonl")
        out = os.path.join(folder, "out")
        if script == "tracecov":
            main, target = TRACECOV.main, "grpo_mse.runs.tracecov.run_tracecov"
            argv = [*tiny_tracecov_argv(table, out), flag, text]
        else:
            main, target = ORACLE.main, "grpo_mse.runs.oracle.run_oracle"
            argv = ["--model", BUILTIN_POLICY, "--dataset", table, "--device", "cpu", "--out_dir", out, flag, text]
        with mock.patch(target, side_effect=Reached):
            try:
                code, stderr = boundary(main, argv)
            except Reached:
                code, stderr = None, ""
        assert (code is None) == flag_ok(flag, text), (flag, text, code, stderr)
        if code is not None:
            assert code == 2
            one_error_line(stderr, flag)
        assert not os.path.exists(out)


# ---- generated --paper CSVs for make_figures ------------------------------------------------------------------

CELLS = {
    "K": [("4", True), ("8", True), ("4.5", False), ("0", False), ("four", False), ("", False), ("1e3", True)],
    "estimator": [("vanilla", True), ("grpo", True), ("oracle", True), ("naive", False), ("", False)],
    "mse": [("4.88e5", True), ("0", True), ("abc", False), ("nan", False), ("-1", False), ("inf", False)],
}


@st.composite
def paper_csvs(draw):
    columns = ["model", "K", "estimator", "mse", "ci_halfwidth"]
    valid = True
    if draw(st.integers(0, 5)) == 0:
        columns.remove(draw(st.sampled_from(["K", "estimator", "mse"])))
        valid = False
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        cells = {"model": draw(st.sampled_from(["Base", "Ins,truct", "数"])), "ci_halfwidth": "0.1"}
        for column, pool in CELLS.items():
            value, ok = draw(st.sampled_from(pool))
            cells[column] = value
            valid = valid and (ok or column not in columns)
        lines.append(cells)
    valid = valid and bool(lines)
    bom = draw(st.booleans())
    return columns, lines, bom, valid


@bounded(40)
@given(paper_csvs())
def test_generated_paper_csvs_are_drawn_or_refused_in_one_line(case):
    import csv

    columns, lines, bom, valid = case
    COUNTS["paper"] = COUNTS.get("paper", 0) + 1
    with tempfile.TemporaryDirectory() as folder:
        path, out = os.path.join(folder, "p.csv"), os.path.join(folder, "figs")
        with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(lines)
        with mock.patch.object(FIGURES, "figure4", return_value=[os.path.join(out, "figure4.png")]) as draw:
            code, stderr = boundary(FIGURES.main, ["--paper", path, "--out_dir", out])
        assert (code == 0) == valid, (columns, lines, code, stderr)
        if valid:  # the panels hold exactly the values of the file
            runs = draw.call_args[0][0]
            got = {
                (label, k, name, value)
                for label, result in runs
                for name, values in result["conditional_on_x"].items()
                for k, value in zip(result["K_list"], values)
                if value == value
            }
            names = {"vanilla": "naive", "grpo": "grpo", "oracle": "oracleV"}
            assert got == {
                (f"paper: {c['model']}", int(float(c["K"])), names[c["estimator"]], float(c["mse"]))
                for c in {(c["model"], c["K"], c["estimator"]): c for c in lines}.values()
            }
        else:
            assert code == 2
            one_error_line(stderr, path)
        assert not os.path.exists(out)


def test_counts_reported():
    """Runs last: prints how many cases each property generated (quoted in docs/safety.md)."""
    print("generated cases:", json.dumps(COUNTS))
