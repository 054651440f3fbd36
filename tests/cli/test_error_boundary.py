"""cli.run's error boundary: broken model folders refused before loading, library failures as one line, a
one-prompt run without an interval and drawn without an empty ratio panel."""

from __future__ import annotations

import io
import json
import shutil
from unittest import mock

import pytest
from conftest import BUILTIN_POLICY
from one_line_checks import FIGURES, boundary, no_tracked_change, one_error_line  # noqa: F401 (autouse fixture)

from grpo_mse.errors import UsageError
from grpo_mse.policy.model_source import check_model_path


@pytest.mark.parametrize(
    "damage, needle",
    [
        ("no_tokenizer", "has no tokenizer files"),
        ("truncated", "is cut short or corrupt"),
        ("hidden_size", "the weights and config.json come from different models"),
        ("bad_config", "not valid JSON"),
    ],
)
def test_broken_model_folders_are_refused_before_loading(tmp_path, damage, needle):
    model = tmp_path / "m"
    shutil.copytree(BUILTIN_POLICY, model)
    check_model_path(str(model))  # the intact copy passes
    if damage == "no_tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            (model / name).unlink()
    elif damage == "truncated":
        data = (model / "model.safetensors").read_bytes()
        (model / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "hidden_size":
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "hidden_size": 2 * config["hidden_size"]}))
    else:
        (model / "config.json").write_text("{")
    with pytest.raises(UsageError, match=needle):
        check_model_path(str(model))


def _full_disk():
    raise OSError(28, "No space left on device", "out/x.jsonl")


@pytest.mark.parametrize(
    "make, needle",
    [
        (_full_disk, "no space left on the device: out/x.jsonl; free some space, then rerun with --resume"),
        (lambda: b"\xe9".decode("utf-8"), "not UTF-8 text"),
        (lambda: json.loads("{"), "malformed JSON"),
        (lambda: __import__("yaml").safe_load("a: [1"), "malformed YAML"),
        (lambda: __import__("jinja2").Template("{% if %}"), "chat template failed"),
        (lambda: __import__("pyarrow").parquet.read_table(io.BytesIO(b"PAR1 garbage")), "parquet/arrow"),
    ],
)
def test_error_boundary_gives_one_line_for_library_failures(make, needle):
    import pyarrow.parquet  # noqa: F401 - the submodule the pyarrow case uses

    from grpo_mse.errors import describe

    with pytest.raises(Exception) as caught:  # noqa: B017, PT011 - the point is what describe makes of any of them
        make()
    line = describe(caught.value, "rerun with --resume")
    assert line is not None and needle in line and "\n" not in line
    assert describe(KeyError("x")) is None and describe(TypeError("x")) is None  # bugs keep their traceback


def test_one_prompt_gives_no_interval():
    import numpy as np

    from grpo_mse.analysis import bootstrap

    one = bootstrap.prompt_weights(1, 50, seed=0)
    assert bootstrap.interval(np.full(len(one), 0.3), one) is None  # [x, x] would claim certainty: n/a
    two = bootstrap.prompt_weights(2, 50, seed=0)
    draws = two @ np.array([0.2, 0.4]) / two.sum(axis=1)
    low, high = bootstrap.interval(draws, two)
    assert low < 0.3 < high


def test_make_figures_draws_a_one_prompt_run_and_no_empty_ratio_panel(tmp_path):
    """A --T 1 run (every interval null, every trace 0) is drawn; a run without grpo and oracleV gets no ratio
    panel (it would be empty under the title "GRPO approaches the oracle baseline")."""
    one = {
        "K_list": [2],
        "conditional_on_x": {"naive": [0.0], "grpo": [0.0], "oracleV": [0.0]},
        "ci95": {"naive": [None], "grpo": [None], "oracleV": [None]},
        "config": {"model": "m", "T": 1},
    }
    biased = {
        "K_list": [2, 4],
        "conditional_on_x": {"drgrpo": [1.0, 0.5]},
        "ci95": {"drgrpo": [0.1, None]},
        "config": {"model": "b", "estimators": ["drgrpo"]},
    }
    for name, result in (("one", one), ("biased", biased)):
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    code, stderr = boundary(FIGURES.main, ["--tracecov", str(tmp_path / "one.json"), "--out_dir", str(tmp_path / "a")])
    assert code == 0 and (tmp_path / "a" / "figure4.png").stat().st_size > 0, stderr
    from grpo_mse.figures import comparisons as figures

    with mock.patch.object(figures, "draw_ratio_panel") as ratio:
        code, stderr = boundary(
            FIGURES.main, ["--tracecov", str(tmp_path / "biased.json"), "--out_dir", str(tmp_path / "b")]
        )
    assert code == 0 and not ratio.called, stderr
    code, stderr = boundary(
        FIGURES.main, ["--advisor", str(tmp_path / "biased.json"), "--out_dir", str(tmp_path / "c")]
    )
    assert code == 2
    one_error_line(stderr, "the advisor needs the grpo and oracleV estimators and this run has drgrpo")
    assert not (tmp_path / "c").exists()
