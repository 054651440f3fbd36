"""TRL's prompt-length filter (issue 36, case 8): with MAX_PROMPT_LENGTH=25 a run dropped 47 of 64 training prompts
and 12 of 16 validation prompts with only ``train=17 val=4`` in its header. Now training prompts that do not fit are
dropped (VERL's filter_overlong_prompts) with a warning line that counts them and the count is recorded, and a
validation prompt that does not fit is refused: held-out accuracy is measured on the whole validation file."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest
from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st
from training_checks import ROOT, one_line_error

from grpo_mse.errors import InputError
from grpo_mse.training.trl_backend import fit_prompt_length


class WordTokenizer:
    """One token per word of the last message: a prompt's length is written in its text."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return list(range(len(messages[-1]["content"].split())))


def rows_of(lengths: list[int]) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": " ".join(["w"] * n)}], "id": i} for i, n in enumerate(lengths)]


@bounded(80)
@given(
    train=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    val=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    limit=st.integers(1, 40),
)
def test_training_prompts_that_do_not_fit_are_dropped_and_counted_validation_ones_refused(train, val, limit):
    too_long_val = [n for n in val if n > limit]
    fitting_train = [i for i, n in enumerate(train) if n <= limit]
    warned = io.StringIO()
    try:
        with contextlib.redirect_stderr(warned):
            kept, dropped = fit_prompt_length(rows_of(train), rows_of(val), WordTokenizer(), limit, "v.parquet")
    except InputError as refused:
        message = str(refused)
        assert too_long_val or not fitting_train, message
        if too_long_val:
            assert message.startswith(f"{len(too_long_val)} of {len(val)} validation prompts in v.parquet are longer")
            assert f"the longest has {max(too_long_val)} tokens" in message and "\n" not in message
        return
    assert not too_long_val and fitting_train
    assert [row["id"] for row in kept] == fitting_train and dropped == len(train) - len(fitting_train)
    warnings = [line for line in warned.getvalue().splitlines() if line.startswith("warning:")]
    if dropped:
        (line,) = warnings
        assert f"{dropped} of {len(train)} training prompts" in line and f"{len(fitting_train)} remain" in line
    else:
        assert not warnings


@pytest.mark.slow
def test_the_issues_run_refuses_its_shrunk_validation_and_warns_of_dropped_training_prompts(tmp_path):
    """The issue's case through trl_train's dry run: 64 training and 16 validation prompts, MAX_PROMPT_LENGTH 25
    (17 and 4 of them fit)."""
    from transformers import AutoTokenizer

    from grpo_mse.training.data import arithmetic_splits, write_splits
    from grpo_mse.training.trl_backend import prompt_tokens

    model = ROOT / "assets" / "train_policy"
    splits = arithmetic_splits(64, 16)
    tokenizer = AutoTokenizer.from_pretrained(model)
    short = [row for row in splits["test"] if prompt_tokens(row, tokenizer) <= 25]
    write_splits({**splits, "short": short}, str(tmp_path))
    reward = str(ROOT / "Policy_Optimization" / "reward.py")
    argv = [sys.executable, "-m", "grpo_mse.training.trl_train", "--model", str(model), "--max_prompt_length", "25"]
    argv += ["--train_file", str(tmp_path / "train.parquet"), "--reward_path", reward]
    argv += ["--output_dir", str(tmp_path / "o"), "--group_size", "2", "--budget", "16", "--dry_run"]

    def dry_run(val_split: str) -> subprocess.CompletedProcess:
        val = ["--val_file", str(tmp_path / f"{val_split}.parquet")]
        return subprocess.run([*argv, *val], cwd=ROOT, capture_output=True, text=True, timeout=300)

    result = dry_run("test")
    one_line_error(result)
    assert "error: 12 of 16 validation prompts" in result.stderr and not (tmp_path / "o").exists()
    result = dry_run("short")
    assert result.returncode == 0, result.stderr
    assert "warning: 47 of 64 training prompts" in result.stderr and f"train=17 val={len(short)} " in result.stdout
