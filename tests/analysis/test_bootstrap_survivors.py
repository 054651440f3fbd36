"""Contracts of the bootstrap module's smaller parts, checked against hand computations and the files they read
(issue 58: written from mutation survivors of analysis/bootstrap.py).

- ``ratio_summary`` puts a ratio of positive means on the log scale by default: its interval is the bootstrap-t
  interval of log R, worked out here by hand on a three-prompt weight matrix.
- ``cells_at`` picks the calibration cells of a run's T: "near" (within T_TOLERANCE, the bound included),
  "between" two simulated T, or "outside".
- ``interval_widening`` gives the calibration table's ``widening`` per calibrated statistic, (0, 0) for what it
  does not list or without a table; ``read_calibration`` keeps the path it looked at and reads the table as
  UTF-8 (JSON's encoding) whatever the locale.
- ``Summary.from_json`` names where a broken saved summary came from, in its own fields and in its pieces.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from grpo_mse.analysis import bootstrap
from grpo_mse.errors import DataError

# Three prompts: the data, four bootstrap draws (each of 3 prompts, none all on one prompt) and the jackknife.
DRAWS = [[2, 1, 0], [0, 1, 2], [1, 0, 2], [1, 2, 0]]
WEIGHTS = np.array([[1, 1, 1], *DRAWS, [0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=np.float64)
NUMERATOR, DENOMINATOR = [1.0, 2.0, 6.0], [1.0, 1.0, 2.0]


def ratio_and_error(w: list[float]) -> tuple[float, float]:
    """R = sum w a / sum w b and its delta-method se sqrt(sum w (a - R b)^2 / (n (n - 1))) / (sum w b / n)."""
    n = sum(w)
    top = sum(wi * a for wi, a in zip(w, NUMERATOR))
    bottom = sum(wi * b for wi, b in zip(w, DENOMINATOR))
    ratio = top / bottom
    spread = sum(wi * (a - ratio * b) ** 2 for wi, a, b in zip(w, NUMERATOR, DENOMINATOR))
    return ratio, math.sqrt(spread / (n * (n - 1))) / (bottom / n)


def linear_quantile(values: list[float], level: float) -> float:
    """The quantile at ``level`` interpolated linearly between order statistics (position level * (n - 1))."""
    ordered = sorted(values)
    position = level * (len(ordered) - 1)
    low = math.floor(position)
    return ordered[low] + (position - low) * (ordered[min(low + 1, len(ordered) - 1)] - ordered[low])


def test_ratio_summary_of_positive_ratio_is_bootstrap_t_on_log_scale():
    ratio, error = ratio_and_error([1, 1, 1])
    log_error = error / ratio  # se(log R) = se(R) / R
    t = []
    for w in DRAWS:
        r, se = ratio_and_error(w)
        t.append((math.log(r) - math.log(ratio)) / (se / r))
    t_low, t_high = linear_quantile(t, 0.025), linear_quantile(t, 0.975)
    expected = [ratio * math.exp(-t_high * log_error), ratio * math.exp(-t_low * log_error)]

    summary, replicates = bootstrap.ratio_summary(WEIGHTS, NUMERATOR, DENOMINATOR)

    assert summary.estimate == pytest.approx(9 / 4)
    assert summary.ci95 == pytest.approx(expected, rel=1e-12)
    assert summary.interval == "studentized" and summary.n_undefined == 0
    assert replicates[1:5] == pytest.approx([ratio_and_error(w)[0] for w in DRAWS])
    # the natural scale gives another interval on the same data: the default is what the test above pins
    natural, _ = bootstrap.ratio_summary(WEIGHTS, NUMERATOR, DENOMINATOR, log=False)
    assert natural.ci95 != pytest.approx(expected, rel=1e-6)


CELLS = [{"T": T, "tail": tail} for T in (48, 96, 500) for tail in ("lognormal:0", "pareto:3")]


@pytest.mark.parametrize(
    ("n_prompts", "T_used", "how"),
    [
        (48, {48}, "near"),
        (60, {48}, "near"),  # 60 / 48 = 1.25 = T_TOLERANCE exactly: within it
        (120, {96}, "near"),  # 120 / 96 = 1.25
        (200, {96, 500}, "between"),  # 200 / 96 and 500 / 200 both beyond 1.25
        (30, set(), "outside"),  # 48 / 30 = 1.6: below the grid
        (700, set(), "outside"),  # 700 / 500 = 1.4: above it
    ],
)
def test_cells_at_near_between_and_outside(n_prompts, T_used, how):
    assert bootstrap.T_TOLERANCE == 1.25
    cells, found = bootstrap.cells_at(n_prompts, CELLS)
    assert found == how
    assert cells == [c for c in CELLS if c["T"] in T_used]


def write_table(path, table) -> str:
    path.write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_interval_widening_of_committed_table_is_its_widening():
    with open(bootstrap.CALIBRATION, encoding="utf-8") as handle:
        documented = json.load(handle)["widening"]
    expected = {name: tuple(float(v) for v in documented[name]) for name in bootstrap.CALIBRATED}
    assert any(w != (0.0, 0.0) for w in expected.values())  # the table widens something: a real check
    assert bootstrap.interval_widening() == expected
    assert bootstrap.interval_widening(bootstrap.read_calibration()) == expected


def test_interval_widening_zero_where_not_listed_or_no_table(tmp_path):
    zero = {name: (0.0, 0.0) for name in bootstrap.CALIBRATED}
    partial = write_table(tmp_path / "partial.json", {"widening": {"c2": [0.5, 2]}})
    assert bootstrap.interval_widening(partial) == {**zero, "c2": (0.5, 2.0)}
    assert bootstrap.interval_widening(write_table(tmp_path / "none.json", {"cells": []})) == zero
    assert bootstrap.interval_widening(write_table(tmp_path / "null.json", {"widening": None})) == zero
    assert bootstrap.interval_widening(str(tmp_path / "absent.json")) == zero


def test_read_calibration_without_file_keeps_its_path(tmp_path):
    absent = str(tmp_path / "absent.json")
    assert bootstrap.read_calibration(absent) == bootstrap.Calibration(absent, None)
    found = bootstrap.simulated_coverage(2.0, 48, absent)
    assert found.status == "unknown" and found.reason == f"no calibration table at {absent}"


READ_BACK = """
import json, locale, sys
from grpo_mse.analysis.bootstrap import read_calibration
print(locale.getpreferredencoding(False))
print(json.dumps(read_calibration(sys.argv[1]).table, ensure_ascii=True))
"""


def test_read_calibration_reads_utf8_under_an_ascii_locale(tmp_path):
    table = {"widening": {"c1": [0.25, 1.5]}, "note": "Pareto tail α > 2, s ≥ 1 (café)"}
    path = write_table(tmp_path / "table.json", table)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run(
        [sys.executable, "-c", READ_BACK, path], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    encoding, read = done.stdout.splitlines()
    assert encoding.lower().replace("-", "") != "utf8"  # the child's locale really is not UTF-8
    assert json.loads(read) == table


GOOD = {"estimate": 2.0, "ci95": [1.0, 3.0], "interval": "studentized-log"}
PIECES = {"scale": "log", "value": 0.7, "error": 0.2, "t": [-1.5, 2.5]}


def test_summary_from_json_reads_pieces_and_names_where_it_broke():
    summary = bootstrap.Summary.from_json({**GOOD, "pieces": PIECES}, "run.json line 3")
    assert summary.pieces == bootstrap.Pieces(**PIECES)
    assert bootstrap.Summary.from_json(summary.to_json()) == summary
    with pytest.raises(DataError, match=r"^run\.json line 3: Summary has unknown bogus$"):
        bootstrap.Summary.from_json({**GOOD, "bogus": 1}, "run.json line 3")
    broken = {key: v for key, v in PIECES.items() if key != "t"}
    with pytest.raises(DataError, match=r"^run\.json line 3: Pieces lacks t$"):
        bootstrap.Summary.from_json({**GOOD, "pieces": broken}, "run.json line 3")
