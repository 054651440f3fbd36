"""Shared by the training-path tests: the repository root, the logged metrics' names, Hypothesis settings and the
one-line error check."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
ACC = "val-core/arithmetic_zero_shot/acc/mean@1"
SCORE = "critic/score/mean"
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def one_line_error(result) -> None:
    lines = result.stderr.strip().split("\n")  # a generated value may hold other line breaks (\x85, \u2028)
    assert result.returncode == 2 and len(lines) == 1 and "error:" in lines[0], (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
