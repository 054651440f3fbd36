"""Checks shared by the property tests and the error-boundary tests: a main run under cli.run's boundary, one
``error:`` line naming the input, no tracked file changed, tables written and run_tracecov argv at tiny sizes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, tracecov_argv

from grpo_mse import cli
from grpo_mse.commands import make_figures as make_figures_command

GOOD_PROMPT = "Solve the arithmetic problem.\n2 + 3 ="
FIGURES = make_figures_command


def boundary(main, argv) -> tuple[int, str]:
    """(exit status, stderr) of ``main(argv)`` under cli.run's error boundary; a traceback fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.run(lambda: main(argv))
        except SystemExit as done:
            return done.code, err.getvalue()
    return 0, err.getvalue()


def one_error_line(stderr: str, names: str) -> None:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert names in errors[0], (names, errors[0])


def tree(folder) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None for a folder); {} when it does not exist: what a refusal
    must leave as it was."""
    found = {}
    for where, folders, files in os.walk(str(folder)):
        for name in folders:
            found[os.path.relpath(os.path.join(where, name), str(folder))] = None
        for name in files:
            with open(os.path.join(where, name), "rb") as handle:
                found[os.path.relpath(os.path.join(where, name), str(folder))] = handle.read()
    return found


def tracked_state() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module", autouse=True)
def no_tracked_change():
    before = tracked_state()
    yield
    assert tracked_state() == before


def write_table(folder: str, rows: list, form: str) -> str:
    path = os.path.join(folder, f"t.{form}")
    if form == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)  # raw unicode, U+2028 included
    else:
        text = json.dumps(rows, ensure_ascii=False)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def tiny_tracecov_argv(table: str, out: str, *flags) -> list[str]:
    return tracecov_argv(table, out, *flags, T=3, M=2, K_list=2, max_new_tokens=2)


# ---- end to end (subprocess): the real command lines ----------------------------------------------------------


def run(script: str, *args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
        timeout=600,
    )
