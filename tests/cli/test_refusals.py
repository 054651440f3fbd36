"""Every mistake of issue 13 through the real command line: exit 2, one line without a traceback, nothing written.

Each case runs as its own process (tests/cli_runner.py forks one per command line after importing the heavy
libraries once; shell demos run directly). Its folder, and the repository's data/, results/ and assets/, are
compared byte for byte before and after. The cases are in refusal_cases.py and refusal_path_cases.py.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from refusal_cases import RULE_CASES
from refusal_path_cases import PATH_CASES

CASES = [*RULE_CASES, *PATH_CASES]


def snapshot(folder: str) -> dict:
    """{relative path: sha256 of the bytes, or "dir"} of everything under ``folder``."""
    state = {}
    for base, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in dirs:
            state[os.path.relpath(os.path.join(base, name), folder)] = "dir"
        for name in files:
            with open(os.path.join(base, name), "rb") as handle:
                state[os.path.relpath(os.path.join(base, name), folder)] = hashlib.sha256(handle.read()).hexdigest()
    return state


def repo_snapshot() -> dict:
    top = {name: "top" for name in os.listdir(ROOT) if name not in (".git", ".pytest_cache", ".ruff_cache")}
    return {
        **top,
        **{f"{d}/{p}": h for d in ("data", "results", "assets") for p, h in snapshot(os.path.join(ROOT, d)).items()},
    }


def _fill(text: str, tmp: str) -> str:
    return text.replace("{tmp}", tmp).replace("{repo}", ROOT)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Run every case; {name: (result, folder before, folder after)} and the repository before/after."""
    folders, before, python, shell = {}, {}, [], []
    for number, case in enumerate(CASES):
        tmp = str(tmp_path_factory.mktemp(f"case{number}"))
        for relative, text in case.setup:
            path = os.path.join(tmp, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:  # bytes as given (e.g. a Latin-1 table), text as UTF-8
                handle.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        folders[case.name], before[case.name] = tmp, snapshot(tmp)
        argv = [os.path.join(ROOT, case.argv[0])] + [_fill(a, tmp) for a in case.argv[1:]]
        spec = {"argv": argv, "cwd": _fill(case.cwd, tmp), "env": {k: _fill(v, tmp) for k, v in case.env.items()}}
        (shell if argv[0].endswith(".sh") else python).append((case.name, spec))
    repo_before = repo_snapshot()
    results = {}
    for name, spec in shell:
        done = subprocess.run(
            ["bash", *spec["argv"]],
            cwd=spec["cwd"],
            env={**os.environ, **spec["env"]},
            capture_output=True,
            text=True,
            timeout=60,
        )
        results[name] = {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    cases_file = tmp_path_factory.mktemp("runner") / "cases.json"
    cases_file.write_text(json.dumps([spec for _, spec in python]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    runner = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "cli_runner.py"), str(cases_file)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert runner.returncode == 0, runner.stderr[-3000:]
    results.update(zip([name for name, _ in python], json.loads(runner.stdout)))
    return (
        {name: (results[name], before[name], snapshot(folders[name])) for name in folders},
        repo_before,
        repo_snapshot(),
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_in_one_line_with_nothing_written(outcomes, case):
    result, before, after = outcomes[0][case.name]
    assert result["returncode"] == case.code, result["stderr"][-2000:]
    assert "Traceback" not in result["stderr"]
    if case.code == 2:
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0] and case.needle in errors[0], result["stderr"][-2000:]
    assert before == after


@pytest.mark.slow
def test_the_repository_is_untouched(outcomes):
    _, repo_before, repo_after = outcomes
    assert repo_before == repo_after


@pytest.mark.slow
def test_the_runner_matches_a_plain_process(outcomes):
    """A forked case gives the same exit status and output as ``python script.py ...``."""
    plain = subprocess.run(
        [sys.executable, os.path.join(ROOT, "Policy_Optimization/sweep_group_size.py"), "--budget", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    forked = outcomes[0]["sweep --budget 0"][0]
    assert (plain.returncode, plain.stdout, plain.stderr) == (forked["returncode"], forked["stdout"], forked["stderr"])
