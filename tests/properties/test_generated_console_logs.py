"""Property-based test (Hypothesis, derandomized): generated TRL/VERL console logs are read right or refused."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st
from training_checks import ACC, PROPERTY, SCORE

from grpo_mse.errors import DataError
from grpo_mse.training.logs import parse_console

# Hypothesis: generated console logs. Either the collector returns exactly the logged values, or it refuses with a
# DataError (one line in the scripts); it never returns a wrong value.
PREFIXES = st.sampled_from(
    [
        "",
        "(TaskRunner pid=12) ",
        "\r 50%|#####     | 4/8 [00:00<00:00, 29.09it/s]",
        "\r100%|##########| 8/8 [00:01<00:00,  6.20it/s]\n",
    ]
)
VALUES = st.one_of(
    st.floats(min_value=0, max_value=1, allow_nan=False).map(lambda x: round(x, 6)),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


@st.composite
def console_logs(draw):
    steps = draw(st.integers(min_value=1, max_value=6))
    truth, lines = {}, []
    for step in range(steps):
        acc, score = draw(VALUES), draw(VALUES)
        truth[(step, ACC)], truth[(step, SCORE)] = acc, score
        fmt = draw(st.sampled_from(["{:.6g}", "np.float64({:.6g})", "{!r}"]))
        parts = [
            f"step:{step}",
            f"actor/pg_loss:{draw(VALUES)}",
            f"{SCORE}:{fmt.format(score)}",
            f"training/global_step:{step}",
            f"{ACC}:{fmt.format(acc)}",
        ]
        lines.append(draw(PREFIXES) + " - ".join(parts) + "\n")
    tear = draw(st.sampled_from(["none", "last", "glue"]))
    where = draw(st.integers(min_value=0, max_value=len(lines) - 1))
    cut = draw(st.integers(min_value=1, max_value=max(1, len(lines[where]) - 1)))
    if tear == "last":
        lines = lines[: where + 1]
        lines[-1] = lines[-1][:cut].rstrip("\n")
    elif tear == "glue" and where + 1 < len(lines):
        lines[where] = lines[where][:cut].rstrip("\n")  # the rest of the line is lost, the next one runs on
    header = "[grpo_train] TRAINER=trl EXPERIMENT_NAME=x GROUP_SIZE=4 SEED=0 BUDGET=32\n"
    return header + "".join(lines), truth


@PROPERTY
@given(case=console_logs())
def test_generated_console_logs_parse_right_or_are_refused(case):
    text, truth = case
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the unterminated last line is skipped with a warning
            records = parse_console(text, r"^(val-core/|critic/score/mean$)", source="gen.log")
    except DataError as error:
        assert "\n" not in str(error) and str(error).startswith("gen.log")
        return
    for step, metric, value in records:  # every value returned is exactly what was logged, and finite
        assert math.isfinite(value) and value == pytest.approx(truth[(step, metric)], rel=1e-5)
    assert len({(s, m) for s, m, _ in records}) == len(records)
