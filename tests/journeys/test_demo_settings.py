"""A mistyped demo setting leaves the repository byte-identical; a demo publishes its staged output only on
success (also with Hypothesis-generated settings)."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st
from training_checks import PROPERTY, ROOT, one_line_error

# ---------------------------------------------------------------- demos: a mistyped setting changes nothing


def repository_state() -> str:
    """Tracked changes, untracked and ignored files (caches aside): equal before and after means byte-identical
    tracked files and nothing new."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "\n".join(line for line in out.splitlines() if "__pycache__" not in line and ".pytest_cache" not in line)


DEMO_CASES = [
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_MODEL": "assets/tiny_polcy"}, "DEMO_MODEL=assets/tiny_polcy"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_OUT": "results/demo"}, "committed results"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_T": "1O"}, "DEMO_T must be an integer"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_OUT": "README.md"}, "is a file"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_OVERWRITE": "yes"}, "DEMO_OVERWRITE must be 0 or 1"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER": "2"}, "DEMO_PAPER must be 0 or 1"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER_M": "1"}, "DEMO_PAPER_M must be an integer >= 2"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER_K_LIST": "4 1"}, "DEMO_PAPER_K_LIST must be an integer >= 2"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER_MODEL": "assets/paper_polcy"}, "DEMO_PAPER_MODEL=assets/paper_polcy"),
    ("theory_demo.sh", {"THEORY_MODEL": "assets/tiny_polcy"}, "THEORY_MODEL=assets/tiny_polcy"),
    ("theory_demo.sh", {"THEORY_OUT": "results/theory"}, "committed results"),
    ("theory_demo.sh", {"THEORY_TABLE_OUT": "results/estimators"}, "committed results"),
    ("train_demo.sh", {"DEMO_MODEL": "assets/train_polcy"}, "model folder not found"),
    ("train_demo.sh", {"DEMO_MODEL": "assets"}, "not a model folder"),
    ("train_demo.sh", {"DEMO_K_LIST": "4 x"}, "'x' is not a positive integer"),
    ("train_demo.sh", {"DEMO_K_LIST": "3"}, "must divide"),
    ("train_demo.sh", {"DEMO_LR": "1e6"}, "below 1"),
    ("train_demo.sh", {"DEMO_SEEDS": "-1"}, "not a non-negative integer"),
    ("train_demo.sh", {"DEMO_RESULTS": "results/training_demo"}, "committed results"),
    ("train_demo.sh", {"DEMO_PYTHON": "no-such-python"}, "not found"),
]


@pytest.mark.parametrize("script,settings_,message", DEMO_CASES)
def test_mistyped_demo_setting_leaves_the_repository_byte_identical(script, settings_, message):
    before = repository_state()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEMO_", "THEORY_"))}
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / script)],
        env={**env, **settings_},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(result)
    assert message in result.stderr
    assert repository_state() == before


def test_train_demo_takes_a_gguf_file_as_every_command_does(tmp_path):
    """DEMO_MODEL=file.gguf passes the model check (converted once into the test's own cache): the next check,
    DEMO_RESULTS naming committed results, is the one that refuses; nothing in the repository changes."""
    from gguf_files import write_gguf

    gguf = write_gguf(
        str(ROOT / "assets" / "tiny_policy"), str(tmp_path / "Tiny-Policy.F32.gguf"), bos=None, eos=2, pad=0
    )
    before = repository_state()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEMO_")}
    settings_ = {
        "DEMO_MODEL": gguf,
        "DEMO_RESULTS": "results/training_demo",
        "GRPO_MSE_GGUF_CACHE": str(tmp_path / "c"),
    }
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "train_demo.sh")],
        env={**env, **settings_},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    one_line_error(result)
    assert "committed results" in result.stderr and "DEMO_MODEL" not in result.stderr
    assert os.listdir(tmp_path / "c")  # the file was converted, so the check read it as a model
    assert repository_state() == before


def test_staged_output_is_published_only_on_success(tmp_path):
    """demo_guard.sh: a failing step leaves the old folder as it was and no staging folder behind."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".grpo_mse_demo").write_text("old")
    (out / "old.txt").write_text("old result")
    script = (
        'source "$1"; stage_output "$2" S; echo new > "$S/new.txt"; [ "$3" = ok ] || exit 3; publish_output "$S" "$2"'
    )
    guard = str(ROOT / "scripts" / "demo_guard.sh")
    failed = subprocess.run(["bash", "-c", script, "x", guard, str(out), "fail"], cwd=tmp_path, timeout=60)
    assert failed.returncode == 3 and sorted(os.listdir(out)) == [".grpo_mse_demo", "old.txt"]
    assert sorted(os.listdir(tmp_path)) == ["out"]
    done = subprocess.run(["bash", "-c", script, "x", guard, str(out), "ok"], cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and sorted(os.listdir(out)) == [".grpo_mse_demo", "new.txt"]
    assert sorted(os.listdir(tmp_path)) == ["out"]
    (out / "README.md").write_text("the experiment's log")  # written by people beside the results: kept
    again = subprocess.run(["bash", "-c", script, "x", guard, str(out), "ok"], cwd=tmp_path, timeout=60)
    assert again.returncode == 0 and sorted(os.listdir(out)) == [".grpo_mse_demo", "README.md", "new.txt"]
    assert (out / "README.md").read_text() == "the experiment's log"


@PROPERTY
@given(t=st.text(max_size=6), m=st.text(max_size=4), k=st.text(max_size=8))
def test_generated_demo_settings_run_or_refuse_without_changing_anything(t, m, k):
    """Generated DEMO_T / DEMO_M / DEMO_K_LIST with one certainly invalid value: exit 2, one line, nothing written."""
    import re

    t, m, k = t or "192", m or "8", k or "2 4 8 16"  # an empty setting means the default
    words = [w for w in re.split(r"[ \t\n]+", k) if w]  # bash's word splitting
    valid = bool(re.fullmatch(r"[0-9]+", t)) and int(t) >= 1 and bool(re.fullmatch(r"[0-9]+", m)) and int(m) >= 2
    valid = valid and bool(words) and all(re.fullmatch(r"[0-9]+", x) and int(x) >= 2 for x in words)
    if valid or "\x00" in t + m + k:
        return  # a valid setting would start the real demo; NUL cannot be in an environment variable
    before = repository_state()
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith("DEMO_")}
    env.update(DEMO_INSTALL="0", DEMO_T=t, DEMO_M=m, DEMO_K_LIST=k, DEMO_OUT="outputs/generated_demo_case")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    one_line_error(result)
    assert repository_state() == before
