"""studies.exact.one_token.oracle_record: the exact oracle's line (exact_theory.py) keeps the saved order."""

from __future__ import annotations

from grpo_mse.tables.outputs import to_json
from studies.exact.one_token import oracle_record

SETTINGS = {"model": "assets/tiny_policy", "n_oracle": 256}
# A line of the exact one-token oracle (results/theory): the fields it adds to a dataset row.
SAVED_EXACT_LINE = (
    '{"id": 0, "prompt": "24 / 8 =", "ground_truth": 3, "V_oracle": 0.7112545919612724, "n_oracle": null, '
    '"correct_count": null, "V_ci95_low": 0.7112545919612724, "V_ci95_high": 0.7112545919612724, "V_method": '
    '"exact one-token enumeration", "oracle_settings": {"model": "assets/tiny_policy", "n_oracle": 256}}'
)


def test_the_exact_line_is_added_after_the_row_in_the_saved_order():
    row = {"id": 0, "prompt": "24 / 8 =", "ground_truth": 3}
    assert to_json(oracle_record(row, 0.7112545919612724, SETTINGS)) == SAVED_EXACT_LINE
    assert "oracle_settings" not in oracle_record({}, 0.5, {})  # no settings: no key
