"""Interval helpers and the checked JSON reader of grpo_mse.tables.outputs."""

from __future__ import annotations

import json
import math

import pytest

from grpo_mse.errors import UsageError
from grpo_mse.tables.outputs import mean_ci, mean_t_interval, read_json, write_atomic


def test_mean_ci_is_a_normal_interval_across_prompts():
    stats = mean_ci([1.0, 2.0, 6.0])
    assert stats["mean"] == 3.0 and stats["n"] == 3 and stats["sd"] == pytest.approx(math.sqrt(7.0))
    assert stats["ci95"] == pytest.approx(1.959964 * math.sqrt(7.0 / 3), rel=1e-6)
    assert math.isnan(mean_ci([4.0])["ci95"])


@pytest.mark.parametrize("n", [2, 3, 5, 10, 31, 40])
def test_mean_t_interval_uses_student_t_quantiles(n):
    stats = pytest.importorskip("scipy.stats")
    values = [float((7 * i) % 11) for i in range(n)]
    mean, half = mean_t_interval(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    quantile = stats.t.ppf(0.975, n - 1)  # a table to 30 degrees of freedom, then a series within 1e-3
    assert mean == pytest.approx(sum(values) / n) and half == pytest.approx(quantile * sd / math.sqrt(n), rel=1e-3)


def test_mean_t_interval_edge_cases():
    assert mean_t_interval([2.5]) == (2.5, 0.0)
    assert all(math.isnan(x) for x in mean_t_interval([]))


def test_read_json_names_what_is_missing(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"K_list": [2]}))
    assert read_json(str(path), ("K_list",), "run")["K_list"] == [2]
    with pytest.raises(UsageError, match=r"not a theory JSON \(no trace_cov\)"):
        read_json(str(path), ("K_list", "trace_cov"), "theory")
    with pytest.raises(FileNotFoundError, match="theory JSON not found"):
        read_json(str(tmp_path / "nope.json"), ("K_list",), "theory")


def test_write_atomic_writes_text_and_bytes_and_leaves_no_temporary(tmp_path):
    write_atomic(str(tmp_path / "sub" / "a.txt"), "ü\n")
    write_atomic(str(tmp_path / "sub" / "b.png"), b"\x89PNG\x00")
    assert (tmp_path / "sub" / "a.txt").read_text(encoding="utf-8") == "ü\n"
    assert (tmp_path / "sub" / "b.png").read_bytes() == b"\x89PNG\x00"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["a.txt", "b.png"]
