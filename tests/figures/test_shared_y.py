"""make_figures.py --share_y (issue 55 item 3): runs compared in the same units share one y scale and one label, so
a gap between them is seen as it is (each panel on its own log scale hid a 11-25x gap beside the paper)."""

from __future__ import annotations

import pytest

from grpo_mse.commands import make_figures

NAMES = ["naive", "grpo", "oracleV"]


def run(scale: float) -> dict:
    means = {n: [scale * 4, scale * 2, scale] for n in NAMES}
    return {"K_list": [4, 8, 16], "conditional_on_x": means, "ci95": {n: [0.0] * 3 for n in NAMES}}


@pytest.mark.parametrize("share_y", [False, True])
def test_mse_panels_share_one_scale_and_label_when_asked(tmp_path, monkeypatch, share_y):
    import grpo_mse.figures.tracecov as tracecov

    drawn = []
    monkeypatch.setattr(tracecov, "save", lambda fig, stem, formats: drawn.append(fig) or [])
    make_figures.figure4([("small", run(10.0)), ("large", run(1e4))], str(tmp_path / "f"), share_y=share_y)
    (fig,) = drawn
    small, large = fig.axes[:2]
    if share_y:
        assert small.get_ylim() == large.get_ylim()
        low, high = small.get_ylim()
        assert low <= 10.0 and high >= 4e4  # both runs inside the one scale
        assert small.get_ylabel() == "MSE (mean over prompts)" and large.get_ylabel() == ""
    else:
        assert small.get_ylim()[1] < 1e3 < large.get_ylim()[0]  # each its own scale
        assert small.get_ylabel() == large.get_ylabel() != ""


def test_share_y_is_a_flag_of_the_command_line():
    assert make_figures.parse_args(["--paper", "results/paper_figure4.csv", "--share_y"]).share_y is True
    assert make_figures.parse_args(["--paper", "results/paper_figure4.csv"]).share_y is False
