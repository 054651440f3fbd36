"""Every documented ``--estimators`` subset runs run_tracecov.py to its outputs (issue 36, case 1: a subset without
oracleV used to stop with ``KeyError: 'oracleV'`` and leave a progress log behind)."""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st
from one_line_checks import boundary, no_tracked_change, tiny_tracecov_argv, write_table  # noqa: F401 (autouse)

from grpo_mse.commands import tracecov as tracecov_command
from grpo_mse.gradients.estimators import ALL

TRACECOV = tracecov_command
ROWS = [
    {"id": 0, "prompt": "Solve the arithmetic problem.\n2 + 3 =", "ground_truth": 5, "V_oracle": 0.5},
    {"id": 1, "prompt": "Solve the arithmetic problem.\n9 - 4 =", "ground_truth": 5, "V_oracle": 0.25},
]


@pytest.mark.slow  # ten runs of the built-in policy in process, about 30 s
@bounded(10)
@given(
    estimators=st.lists(st.sampled_from(ALL), min_size=1, max_size=len(ALL), unique=True),
    no_advisor=st.booleans(),
    plot=st.booleans(),
)
def test_every_estimator_subset_runs_to_its_outputs(estimators, no_advisor, plot):
    with tempfile.TemporaryDirectory() as folder:
        table, out = write_table(folder, ROWS, "jsonl"), os.path.join(folder, "out")
        flags = ["--estimators", *estimators] + (["--no_advisor"] if no_advisor else [])
        argv = tiny_tracecov_argv(table, out, *flags)
        if plot:
            argv = [a for a in argv if a != "--skip_plot"] + ["--plot_path", out]
        code, stderr = boundary(TRACECOV.main, argv)
        assert code == 0, stderr
        names = sorted(os.listdir(out))
        assert not [n for n in names if ".progress" in n], names  # the run finished: no progress log is left
        (main,) = [n for n in names if n.endswith(".json") and not n.endswith("_detailed.json")]
        with open(os.path.join(out, main), encoding="utf-8") as handle:
            result = json.load(handle)
        assert list(result["conditional_on_x"]) == estimators
        assert any(n.endswith("_K2_detailed.json") for n in names) and any(n.endswith("_per_prompt.csv") for n in names)
        assert plot == any(n.endswith(".png") for n in names)
