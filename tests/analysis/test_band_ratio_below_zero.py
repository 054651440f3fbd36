"""ratio_by_V_band (issue 45, case 14): a band's mean MSE can be below 0 (vanilla's MSE adds an unbiased estimate
of its squared bias), and its ratio to the oracle's was saved as it came (-0.032 at V >= 0.75 in the v3 run) with
no mark. Like every other ratio of mean MSEs it is now clipped at 0 and marked unreliable (docs/statistics.md)."""

from __future__ import annotations

import numpy as np
from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.analysis import bootstrap, paired
from grpo_mse.analysis.paired import V_BANDS
from studies.advisor.simulated_records import simulated_prompt

PROMPT = st.tuples(
    st.sampled_from([0.1, 0.3, 0.6, 0.8, 1.0]),  # V_oracle: one value per band, and V = 1 in the last
    st.floats(-3.0, 3.0),  # vanilla's MSE (its bias^2 estimate can take it below 0)
    st.floats(0.1, 3.0),  # the oracle's
)


@bounded(40)
@given(prompts=st.lists(PROMPT, min_size=2, max_size=12))
def test_a_band_ratio_below_zero_is_clipped_and_marked(prompts):
    records = {
        k: [
            simulated_prompt(
                k,
                i,
                {"naive": 1.0, "oracleV": oracle},
                V_oracle=v,
                bias2={"naive": vanilla - 1.0},
                mse={"naive": vanilla, "oracleV": oracle},
            )
            for i, (v, vanilla, oracle) in enumerate(prompts)
        ]
        for k in (2, 4)
    }
    out = paired.run_statistics(records, [2, 4], ["naive", "oracleV"], n_boot=200)
    bands = out.paired.to_json()["ratio_by_V_band"]
    for per_band in bands["ratio"]["naive/oracleV"]:
        for (low, high), summary in zip(V_BANDS, per_band):
            inside = [(a, b) for v, a, b in prompts if low <= v < high or (high == 1.0 and v == 1.0)]
            if not inside:
                assert summary["estimate"] is None
                continue
            ratio = np.mean([a for a, _ in inside]) / np.mean([b for _, b in inside])
            assert np.isclose(summary["estimate"], ratio)
            assert summary["ci95"][0] >= 0.0
            marked = summary.get("unreliable") == bootstrap.UNRELIABLE
            if ratio < 0:
                assert marked, summary
            elif summary["ci95"][1] > 0:
                assert not marked, summary
