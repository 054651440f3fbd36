"""What run_tracecov.py prints: an MSE estimate below 0 is marked as the paired lines mark theirs (issue 36, case 2:
``K=   2  vanilla=-80.42±1.5e+02`` carried no flag)."""

from __future__ import annotations

from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.gradients import estimators as est
from grpo_mse.runs.tracecov import summary_lines

NAMES = [est.VANILLA, est.GRPO, est.ORACLE]


@bounded(40)
@given(st.lists(st.lists(st.floats(-1e4, 1e4).filter(lambda v: abs(v) > 1e-6), min_size=3, max_size=3), min_size=1))
def test_each_mse_below_zero_is_flagged_unreliable(values_by_k):
    ks = [2**i for i in range(1, len(values_by_k) + 1)]
    means = {n: [row[j] for row in values_by_k] for j, n in enumerate(NAMES)}
    result = {"K_list": ks, "conditional_on_x": means, "ci95": {n: [1.0] * len(ks) for n in NAMES}}
    lines = summary_lines(result)
    for i, k in enumerate(ks):
        (line,) = [text for text in lines if text.startswith(f"K={k:4d}  ")]
        for name in NAMES:
            cell = line.split(f"{est.get(name).label}=", 1)[1].split("  ", 1)[0]
            assert cell.endswith("(unreliable: below 0)") == (means[name][i] < 0), (name, cell)


def test_one_prompt_s_missing_interval_prints_as_n_a():
    """Issue 54, item 9: with one prompt (--T 1) no interval exists (nan in memory, null in the JSON); the summary
    prints ``[n/a]`` as docs/safety.md says (it printed ``vanilla=0±nan``)."""
    for missing in (float("nan"), None):
        means = {n: [0.0, 12.5] for n in NAMES}
        result = {"K_list": [2, 4], "conditional_on_x": means, "ci95": {n: [missing, missing] for n in NAMES}}
        rows = [line for line in summary_lines(result) if line.startswith("K=")]
        assert rows == [
            "K=   2  vanilla=0 [n/a]  GRPO=0 [n/a]  oracle baseline=0 [n/a]",
            "K=   4  vanilla=12.5 [n/a]  GRPO=12.5 [n/a]  oracle baseline=12.5 [n/a]",
        ], rows
