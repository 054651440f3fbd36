"""Table 2 from collected runs: one seed gives "n/a", a bad CSV is one line, out-of-range rows are refused."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from training_checks import ACC, ROOT, one_line_error

from grpo_mse.errors import DataError

# ---------------------------------------------------------------- figures: one seed, bad CSV


def test_one_seed_says_n_a_and_a_bad_csv_is_one_line(tmp_path):
    from grpo_mse.figures.training import table2
    from studies.train_demo_summary import summary

    frame = pd.DataFrame(
        {
            "K": [4, 4, 8, 8],
            "seed": [0, 0, 0, 0],
            "step": [0, 2, 0, 2],
            "metric": [ACC] * 4,
            "value": [0.25, 0.5, 0.25, 0.375],
        }
    )
    table = table2(frame)
    assert "**50.00 ± n/a**" in table and "37.50 ± n/a" in table and "± 0.00" not in table
    assert "| 4 | 1 | 0.250 ± n/a | 0.500 ± n/a | 0.250 ± n/a |" in summary(frame)
    two = pd.concat([frame, frame.assign(seed=1, value=frame["value"] + 0.125)])
    assert "n/a" not in table2(two)
    bad = tmp_path / "bad.csv"
    bad.write_text(f"K,seed,step,metric,value\nfour,0,1,{ACC},0.5\n")
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "plots" / "make_figures.py"),
            "--training_csv",
            str(bad),
            "--out_dir",
            str(tmp_path / "fig"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(result)
    assert "row 2: K 'four' is not a whole number" in result.stderr and not (tmp_path / "fig").exists()


@pytest.mark.parametrize(
    "row, message",
    [
        (f"2,1,-1,{ACC},0.5", "row 3: step -1 must be >= 0"),
        (f"0,1,1,{ACC},0.5", "row 3: K 0 must be >= 1"),
        (f"2,-2,1,{ACC},0.5", "row 3: seed -2 must be >= 0 (-1: default)"),
        (f"2,1,1,{ACC},1.5", f"row 3: {ACC} 1.5 is not an accuracy in [0, 1]"),
        (f"2,1,1,{ACC},-0.25", f"row 3: {ACC} -0.25 is not an accuracy in [0, 1]"),
    ],
)
def test_table2_refuses_out_of_range_rows(tmp_path, row, message):
    """User sweep (issue 25): a negative step moved Table 2's common step to 0, an accuracy of 150 (a percent
    typed for a share) printed 15000%. Out-of-range rows are refused naming the row; a reward metric may leave
    [0, 1]."""
    from grpo_mse.training.runs_table import read_training

    bad = tmp_path / "bad.csv"
    bad.write_text(f"K,seed,step,metric,value\n2,1,0,{ACC},0.25\n{row}\n")
    with pytest.raises(DataError) as refused:
        read_training(str(bad))
    assert str(refused.value) == f"{bad} {message}"
    reward = tmp_path / "reward.csv"
    reward.write_text(
        "K,seed,step,metric,value\n2,1,0,val-core/x/reward/mean@1,-1.5\n2,1,1,val-core/x/reward/mean@1,3\n"
    )
    assert list(read_training(str(reward))["value"]) == [-1.5, 3.0]
