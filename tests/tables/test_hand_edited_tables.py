"""Hand-edited oracle tables (issue 36, cases 5 to 7): run_tracecov.py names what is wrong with an edited V_oracle
(its type, a null, a value outside [0, 1]), refuses a V_oracle that disagrees with the row's own
correct_count / n_oracle and a gold that is not a whole number as answers are read, in one line naming the row,
before any model loads and with nothing written."""

from __future__ import annotations

import math
import os
import tempfile
from unittest import mock

import one_line_checks as checks
from conftest import bounded
from gold_strategies import MALFORMED, WHOLE, golds
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.commands import tracecov as tracecov_command

TRACECOV = tracecov_command
no_tracked_change = checks.no_tracked_change  # the autouse fixture: this module changes no tracked file


class Reached(Exception):
    """Every input check passed (raised instead of loading the model)."""


def verdict(rows: list[dict]) -> tuple[int | None, str]:
    """(exit status, stderr) of run_tracecov.py on ``rows`` (None: it went past every check); nothing is written."""
    with tempfile.TemporaryDirectory() as folder, mock.patch("grpo_mse.runs.tracecov.load_policy", side_effect=Reached):
        table, out = checks.write_table(folder, rows, "jsonl"), os.path.join(folder, "out")
        try:
            code, stderr = checks.boundary(TRACECOV.main, checks.tiny_tracecov_argv(table, out))
        except Reached:
            code, stderr = None, ""
        assert not os.path.exists(out)
        return code, stderr.replace(table, "t.jsonl")


def expect(rows: list[dict], *words: str) -> None:
    """``rows`` go past every check when no ``words`` are given, else stop in one line holding each of them."""
    code, stderr = verdict(rows)
    if not words:
        assert code is None, stderr
        return
    assert code == 2
    for part in words:
        checks.one_error_line(stderr, part)


def rows_with(edited: dict, position: int) -> list[dict]:
    rows = [{"prompt": checks.GOOD_PROMPT, "ground_truth": 5, "V_oracle": 0.5} for _ in range(2)]
    rows[position] = {**rows[position], **edited}
    return [{key: value for key, value in row.items() if value is not DELETED} for row in rows]


DELETED = object()
V_EDITS = st.one_of(  # (edited value, what the one line must say about it; None: accepted)
    st.floats(0, 1).map(lambda v: (v, None)),
    st.floats(allow_nan=True).filter(lambda v: not 0 <= v <= 1).map(lambda v: (v, "must be a probability in [0, 1]")),
    st.floats(0, 1).map(lambda v: (str(v), "is text, not a number")),
    st.text(max_size=4).map(lambda v: (v, "is text, not a number")),
    st.just((None, "'V_oracle' is null")),
    st.booleans().map(lambda v: (v, "is a bool, not a number")),
    st.lists(st.floats(0, 1), max_size=2).map(lambda v: (v, "is a list, not a number")),
    st.just((DELETED, "has no 'V_oracle' field")),
)


@bounded(80)
@given(V_EDITS, st.integers(0, 1))
def test_an_edited_v_oracle_is_refused_naming_its_problem(edit, position):
    value, expected = edit
    expect(rows_with({"V_oracle": value}, position), *([f"t.jsonl: row {position}", expected] if expected else []))


@st.composite
def counted_rows(draw):
    """(edits of one row: n_oracle, correct_count and V_oracle, the one line's words or None when consistent)."""
    n = draw(st.integers(1, 4096))
    count = draw(st.integers(0, n))
    kind = draw(st.sampled_from(["consistent", "edited V", "count above n", "negative count", "fractional count"]))
    if kind == "consistent":  # as calculate_oracle_v.py writes it, or rounded as a hand-copied value might be
        value = draw(st.sampled_from([count / n, float(f"{count / n:.12g}")]))
        return {"n_oracle": n, "correct_count": count, "V_oracle": value}, None
    if kind == "edited V":
        value = draw(st.floats(0, 1).filter(lambda v: not math.isclose(v, count / n, rel_tol=1e-9, abs_tol=1e-6)))
        return {"n_oracle": n, "correct_count": count, "V_oracle": value}, f"correct_count {count} of n_oracle {n}"
    bad = {"count above n": n + draw(st.integers(1, 5)), "negative count": -draw(st.integers(1, 5))}.get(kind, 1.5)
    return {"n_oracle": n, "correct_count": bad, "V_oracle": 0.5}, f"correct_count {bad!r}"


@bounded(60)
@given(counted_rows(), st.integers(0, 1))
def test_v_oracle_must_agree_with_the_rows_own_counts(case, position):
    edits, expected = case
    expect(rows_with(edits, position), *([f"t.jsonl: row {position} ", expected] if expected else []))


def test_the_issues_row_is_refused():
    rows = rows_with({"V_oracle": 0.9, "n_oracle": 256, "correct_count": 2}, 1)
    expect(rows, "t.jsonl: row 1 has V_oracle 0.9 but correct_count 2 of n_oracle 256 gives 0.0078125")


@bounded(80)
@given(golds(), st.integers(0, 1))
def test_a_gold_that_is_no_whole_number_is_refused_where_the_table_is_read(case, position):
    text, verdict_of_gold, _ = case
    reason = "well-formed number" if verdict_of_gold == MALFORMED else "not a whole number"
    words = [] if verdict_of_gold == WHOLE else [f"t.jsonl: row {position} has ground_truth {text!r}, not a ", reason]
    expect(rows_with({"ground_truth": text}, position), *words)
