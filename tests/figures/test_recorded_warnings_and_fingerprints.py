"""Issue 45, cases 10 and 11: a run on an oracle table made with another model or answer rule records the
mismatch in its saved config (``warnings``, so the result JSON holds it, not only the run's stderr) and
make_figures.py shows it; one run named by two model paths of the same fingerprint is drawn once."""

from __future__ import annotations

import json
from unittest import mock

from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st
from one_line_checks import FIGURES, boundary

from grpo_mse.tables.inputs import settings_mismatch

TABLE_SETTINGS = {"model": "m", "temperature": 1.0, "top_p": 0.95, "max_new_tokens": 32, "answer_rule": "row"}
RUN = {"K_list": [2, 4], "conditional_on_x": {"grpo": [3.0, 2.0], "oracleV": [2.0, 1.5]}}


@bounded(30)
@given(
    model=st.sampled_from(["m", "other_model"]),
    answer_rule=st.sampled_from(["row", "final_answer"]),
    fingerprints=st.sampled_from([(None, None), ("sha256:a", "sha256:a"), ("sha256:a", "sha256:b")]),
    recorded=st.booleans(),
)
def test_the_mismatch_is_recorded_in_the_saved_config(model, answer_rule, fingerprints, recorded):
    table_print, run_print = fingerprints
    table = [{"oracle_settings": {**TABLE_SETTINGS, "model_fingerprint": table_print}} if recorded else {}] * 3
    run = {**TABLE_SETTINGS, "model": model, "answer_rule": answer_rule, "model_fingerprint": run_print}
    line = settings_mismatch(table, dict(run))  # without record the config is left as it is
    saved = dict(run)
    assert settings_mismatch(table, saved, record=True) == line and "warnings" not in run
    assert saved["warnings"] == ([line] if line else [])
    differs = not recorded or answer_rule != "row" or (model != "m" if not run_print else table_print != run_print)
    assert bool(line) == differs, (line, run)
    assert json.loads(json.dumps(saved))["warnings"] == saved["warnings"]  # saved as it is in the result JSON


def test_make_figures_shows_a_recorded_warning(tmp_path):
    line = "oracle table sampled with other settings: answer_rule='row' (run: 'final_answer')"
    path = tmp_path / "tracecov_a.json"
    path.write_text(json.dumps({**RUN, "ci95": RUN["conditional_on_x"], "config": {"model": "m", "warnings": [line]}}))
    quiet = tmp_path / "tracecov_b.json"
    quiet.write_text(json.dumps({**RUN, "ci95": RUN["conditional_on_x"], "config": {"model": "n", "seed": 1}}))
    with mock.patch("grpo_mse.figures.tracecov.draw_mse_panel") as panel:
        code, stderr = boundary(FIGURES.main, ["--tracecov", str(path), str(quiet), "--out_dir", str(tmp_path / "o")])
    assert code == 0, stderr
    assert f"warning: {path} recorded: {line}" in stderr and str(quiet) not in stderr
    titles = [call.kwargs["title"] for call in panel.call_args_list]
    assert titles == ["m\n(oracle table settings: see its warnings)", "n"]


@st.composite
def copies_of_runs(draw):
    """Runs given to make_figures: each one of a few runs (its fingerprint and numbers), named by one of a few
    model paths (a bit-identical copy of a model folder, e.g. an adapter, has another path and the same
    fingerprint); some without a recorded fingerprint, named by their path alone."""
    runs = []
    for _ in range(draw(st.integers(1, 6))):
        run = draw(st.integers(0, 2))
        fingerprint = draw(st.sampled_from([f"sha256:{run}", None]))
        model = draw(st.sampled_from(["adapters/lora", "/abs/copy_of_lora", "lora_copy"]))
        runs.append((run, fingerprint, model))
    return runs


@bounded(30)
@given(runs=copies_of_runs())
def test_one_run_under_several_model_paths_is_drawn_once(tmp_path_factory, runs):
    """Before: a run resumed through a bit-identical copy of its adapter (same fingerprint, other model string) was
    drawn twice. Runs with a fingerprint are one run per (fingerprint, numbers); without one, per model path."""
    folder = tmp_path_factory.mktemp("runs")
    paths = []
    for index, (run, fingerprint, model) in enumerate(runs):
        numbers = {"grpo": [3.0 + run, 2.0], "oracleV": [2.0, 1.5]}
        config = {"model": model, "seed": 0, "T": 4, "M": 2, "save_json": f"out{index}"}
        if fingerprint:
            config["model_fingerprint"] = fingerprint
        path = folder / f"tracecov_{index}.json"
        path.write_text(json.dumps({"K_list": [2, 4], "conditional_on_x": numbers, "ci95": numbers, "config": config}))
        paths.append(str(path))
    with mock.patch.object(FIGURES, "figure4", return_value=[]) as figure4:
        code, stderr = boundary(FIGURES.main, ["--tracecov", *paths, "--out_dir", str(folder / "out")])
    assert code == 0, stderr
    (drawn, _), _ = figure4.call_args
    expected = {(run, fingerprint) if fingerprint else (run, None, model) for run, fingerprint, model in runs}
    assert len(drawn) == len(expected)
