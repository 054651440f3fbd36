"""docs/safety.md's resume-key lists name every setting that --resume checks (issue 45, case 12: both lacked
--answer_rule, which both scripts check): each flag of ``RESULT_FIELDS`` appears in its script's bullet."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest

from grpo_mse.config.gradient_evaluation import OracleConfig, TracecovConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOT_FLAGS = {"model", "dataset"}  # named in words: "model id (full)", "the dataset's fingerprint"


def bullet(script: str) -> str:
    text = open(os.path.join(ROOT, "docs", "safety.md"), encoding="utf-8").read()
    match = re.search(rf"^  \* `{re.escape(script)}`: (.*?)(?=^  \* |^\n)", text, flags=re.M | re.S)
    assert match, f"docs/safety.md has no resume-key bullet for {script}"
    return match.group(1)


@pytest.mark.parametrize(
    "script, config", [("run_tracecov.py", TracecovConfig), ("calculate_oracle_v.py", OracleConfig)]
)
def test_every_resume_key_flag_is_listed(script, config):
    flags = {f.name for f in dataclasses.fields(config)}
    listed = bullet(script)
    missing = [
        f"--{name}" for name in config.RESULT_FIELDS if name in flags - NOT_FLAGS and f"`--{name}`" not in listed
    ]
    assert not missing, f"docs/safety.md, {script}'s resume keys lack {missing}"
