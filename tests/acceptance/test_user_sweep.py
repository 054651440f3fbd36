"""The new-user sweep as tests (issue 35 item 5; the cases are in sweep_cases.py): each command line a new user
would type, run in order in one scratch folder, must give what it is expected to (help, a right result, or a
one-line refusal that writes nothing), print no traceback, and leave the repository and the sweep's inputs as they
were.

By default only the cases that need no training run (about 220 command lines); `pytest -m acceptance
tests/acceptance` runs the whole sweep (the TRL training runs and everything that reads them; about 15 minutes on
2 cores). `USER_SWEEP_MD=path` writes the run's table (the one docs/user_sweep.md quotes) when the module ends.
"""

import os
import sys
from pathlib import Path

import pytest
from sweep_cases import cases, make_inputs, markdown, needs_training, run_case, summary, sweep_env

CASES = cases()


def case_param(index, case):
    marks = [pytest.mark.acceptance, pytest.mark.slow] + ([pytest.mark.sweep_full] if needs_training(case) else [])
    return pytest.param(case, id=f"{index:03d}-{case.group}-{case.expect}", marks=marks)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    work = tmp_path_factory.mktemp("user_sweep")
    make_inputs(work)
    rows: list[dict] = []
    yield work, sweep_env(sys.executable), rows
    if report := os.environ.get("USER_SWEEP_MD"):
        Path(report).write_text(markdown(rows, summary(rows)))


@pytest.mark.parametrize("case", [case_param(i, case) for i, case in enumerate(CASES)])
def test_user_command(sweep, case):
    work, env, rows = sweep
    row = run_case(case, work, env)
    rows.append(row)
    assert not row["traceback"], f"traceback: {row['first_line']}"
    assert not row["lost"], row["lost"]
    assert row["problem"] is None, f"{row['problem']} (first line: {row['first_line']})"


def test_the_default_run_keeps_most_of_the_sweep_and_no_training():
    # The split is by what a case reads, not by hand: a new case that reads the training cases' folders must land
    # in the full sweep, and the default run must still cover every group that needs no training.
    default = [case for case in CASES if not needs_training(case)]
    assert all(case.group != "train" for case in default)
    assert {case.group for case in CASES} - {case.group for case in default} == {"train"}
    assert len(default) >= 0.75 * len(CASES)
