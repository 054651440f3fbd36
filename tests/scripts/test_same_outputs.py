"""scripts/same_outputs.sh, the refactoring check: against this checkout's own commit every file is the same (the
comparison reads every output and exits 0); a name that is no commit is refused in one line with exit 2."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run(
        ["bash", "scripts/same_outputs.sh", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_the_checkout_against_its_own_commit_is_the_same():
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "grpo_mse"], cwd=ROOT).returncode:
        pytest.skip("the package has uncommitted changes: HEAD is not this checkout's code")
    done = run("HEAD")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 11 and all(line.startswith("same:") for line in lines)  # 4 + 4 + 3 files
    assert any(line.endswith("b/tracecov_tiny_policy.json") for line in lines)  # std-GRPO's advisor run compared
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "same_outputs" not in worktrees  # its checkout of the base commit is removed


def test_a_name_that_is_no_commit_is_refused_in_one_line():
    done = run("no-such-commit-xyz")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["error: no-such-commit-xyz is no commit of this repository"]
