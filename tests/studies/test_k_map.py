"""scripts/k_map.py: one row per setting from the runs' advisor, and the widest pair with separated intervals."""

from studies.advisor import k_map as k_map_command

script = k_map_command


def _row(name, k, low, high):
    return {"setting": name, "K_star": k, "K_star_ci95": [low, high]}


def test_widest_pair_needs_separated_intervals():
    rows = [_row("a", 2.0, 1.5, 2.5), _row("b", 3.0, 2.4, 3.6), _row("c", 9.0, 7.0, 12.0), _row("d", 5.0, 1.0, 20.0)]
    # a-c (x4.5) is the widest separated pair; a-d (x2.5) overlaps, a-b overlaps, b-c separated (x3)
    assert script.widest_pair(rows) == {"low": "a", "high": "c", "ratio": 4.5}
    assert script.widest_pair([_row("a", 2.0, 1.0, 3.0), _row("b", 2.5, 2.0, 3.5)]) is None


def test_setting_row_reads_the_advisor():
    result = {
        "n_prompts": [48, 48],
        "mean_V_oracle": 0.4,
        "group_size_advisor": {
            "pooled": {"c1": 4.0, "c3": 36.0, "K_star_exact": 4.0},
            "ci95": {"K_star_exact": [3.0, 5.0]},
        },
    }
    row = script.setting_row("s", result)
    assert row == {
        "setting": "s",
        "prompts": 48,
        "mean_V": 0.4,
        "c1": 4.0,
        "c3": 36.0,
        "K_star": 4.0,
        "K_star_ci95": [3.0, 5.0],
    }
    result["group_size_advisor"]["pooled"]["c1"] = float("nan")
    assert script.setting_row("s", result)["c1"] is None
