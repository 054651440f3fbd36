"""Figure 4 draws every run once and every curve of its legend (issue 36, case 2): a run given twice (same settings,
model and numbers) is one panel with a note naming both files, and an MSE estimate at or below 0 (vanilla's
unbiased bias² estimate can be negative at few prompts) is marked where a log axis cannot draw it."""

from __future__ import annotations

import json
import math
import os
from unittest import mock

from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st
from one_line_checks import FIGURES, boundary

from grpo_mse.figures.tracecov import draw_mse_panel, plt, style
from grpo_mse.gradients.estimators import UNBIASED, VANILLA

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MSE_VALUES = st.one_of(
    st.floats(1e-3, 1e6),
    st.floats(-1e6, -1e-3),
    st.just(0.0),
)


@st.composite
def runs_with_some_estimates_below_zero(draw):
    ks = sorted(draw(st.sets(st.sampled_from([2, 4, 8, 16, 32]), min_size=1, max_size=4)))
    names = draw(st.lists(st.sampled_from([VANILLA, *UNBIASED]), min_size=1, max_size=3, unique=True))
    means = {n: [draw(MSE_VALUES) for _ in ks] for n in names}
    return {"K_list": ks, "conditional_on_x": means, "ci95": {n: [1.0] * len(ks) for n in names}}


def visible(ax, y: float) -> bool:
    low, high = ax.get_ylim()
    return low <= y <= high and (ax.get_yscale() == "linear" or y > 0)


@bounded(60)
@given(runs_with_some_estimates_below_zero())
def test_every_estimate_in_the_legend_is_drawn_or_marked(run):
    fig, ax = plt.subplots()
    draw_mse_panel(ax, run)
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    for name, means in run["conditional_on_x"].items():
        (label,) = [text for text in legend if text.startswith(style(name)["label"])]
        assert ("below 0" in label) == any(v < 0 for v in means), (label, means)
        curve = next(c for c in ax.containers if c.get_label() == label).lines[0]
        drawn = {k for k, y in zip(curve.get_xdata(), curve.get_ydata()) if math.isfinite(y) and visible(ax, y)}
        marks = {
            k
            for line in ax.lines
            if line.get_marker() == "v" and line.get_color() == style(name)["color"]
            for k in line.get_xdata()
        }
        for k, value in zip(run["K_list"], means):
            assert (k in drawn and math.isclose(curve.get_ydata()[list(curve.get_xdata()).index(k)], value)) or (
                k in marks and value <= 0
            ), (name, k, value, ax.get_yscale())
    plt.close(fig)


def test_a_run_given_twice_is_drawn_once_with_a_note(tmp_path):
    config = {"model": "assets/tiny_policy", "model_fingerprint": "sha256:ab", "seed": 0, "T": 4, "M": 2}
    run = {
        "K_list": [2, 4],
        "conditional_on_x": {"grpo": [3.0, 2.0], "oracleV": [2.0, 1.5]},
        "ci95": {"grpo": [0.5, 0.5], "oracleV": [0.5, 0.5]},
    }
    paths = []
    for stem, seed, folder in (("a_062302", 0, "x"), ("a_062302_2", 0, "y"), ("b", 1, "x")):
        path = tmp_path / f"tracecov_{stem}.json"
        path.write_text(json.dumps({**run, "config": {**config, "seed": seed, "save_json": folder}}))
        paths.append(str(path))
    with mock.patch.object(FIGURES, "figure4", return_value=[]) as figure4:
        code, stderr = boundary(FIGURES.main, ["--tracecov", *paths, "--out_dir", str(tmp_path / "out")])
    assert code == 0, stderr
    (drawn, _), _ = figure4.call_args
    assert len(drawn) == 2
    (note,) = [line for line in stderr.splitlines() if line.startswith("note:")]
    assert paths[1] in note and paths[0] in note and paths[2] not in note


def test_paper_models_keeps_only_the_named_rows_of_the_published_values():
    """--paper_models Instruct: the Instruct row of paper_figure4.csv alone, its values as published."""
    import csv

    from grpo_mse.commands.make_figures import paper_results

    path = os.path.join(ROOT, "results", "paper_figure4.csv")
    runs = paper_results(path, ["Instruct"])
    assert [label for label, _ in runs] == ["paper: Instruct"]
    with open(path, encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["model"] == "Instruct" and r["estimator"] == "oracle"]
    result = runs[0][1]
    assert result["K_list"] == sorted({int(r["K"]) for r in rows}) == [4, 8, 16, 32, 64]
    assert result["conditional_on_x"]["oracleV"] == [float(r["mse"]) for r in sorted(rows, key=lambda r: int(r["K"]))]
    assert len(paper_results(path)) == 3  # every model without the filter
