"""Issue 54, item 7: a config built from Python is type-checked at construction as its command line would check
it (``flags.check_types``): ``TracecovConfig(estimators="grpo")`` was split into ['g', 'r', 'p', 'o'] and failed
after the model loaded, ``K_list=[]`` failed in ``min()``, ``T="4"`` said "--T must be >= 1 (got 4)", and
``M=4.0`` and ``T=True`` were taken. Each is now a FieldTypeError (a one-line UsageError that is also a TypeError)
before anything is read or written."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pathlib
import pkgutil
import sys

import pytest
from conftest import BUILTIN_POLICY, ROOT, bounded
from hypothesis import given
from hypothesis import strategies as st

import grpo_mse
import studies
from grpo_mse import flags
from grpo_mse.config.gradient_evaluation import OracleConfig, TracecovConfig
from grpo_mse.errors import FieldTypeError, UsageError


def good(tmp_path) -> dict:
    return dict(
        model=BUILTIN_POLICY,
        oracle_table="t.jsonl",
        device="cpu",
        dtype="fp32",
        save_json=str(tmp_path / "out"),
        skip_plot=True,
        T=2,
        M=2,
        K_list=[2, 4],
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"estimators": "grpo"}, "--estimators must be a list of values, each a string (got 'grpo')"),
        ({"K_list": []}, "--K_list needs one value or more (got an empty list)"),
        ({"T": "4"}, "--T must be an integer (got '4' of type str)"),
        ({"M": 4.0}, "--M must be an integer (got 4.0 of type float)"),
        ({"T": True}, "--T must be an integer (got True of type bool)"),
        ({"K_list": [2, 4.0]}, "--K_list must hold values each an integer (got 4.0 of type float)"),
        ({"skip_plot": 1}, "--skip_plot must be True or False (got 1 of type int)"),
        ({"temperature": "1"}, "--temperature must be a number (got '1' of type str)"),
        ({"device": 0}, "--device must be a string (got 0 of type int)"),
        ({"oracle_table": None}, "--oracle_table must be given: None is not a string"),
    ],
)
def test_the_issue_s_values_are_refused_at_construction(tmp_path, change, message):
    with pytest.raises(FieldTypeError) as refused:
        TracecovConfig(**{**good(tmp_path), **change})
    assert str(refused.value) == message
    assert isinstance(refused.value, UsageError) and isinstance(refused.value, TypeError)
    assert not (tmp_path / "out").exists()  # refused before the output folder is made


def test_values_a_flag_would_give_are_taken(tmp_path):
    config = TracecovConfig(**{**good(tmp_path), "K_list": (2, 4), "temperature": 1, "max_memory_gb": 3})
    assert config.K_list == [2, 4] and config.temperature == 1
    assert OracleConfig(model=BUILTIN_POLICY, dataset="d.jsonl", device="cpu", out_dir=str(tmp_path), limit=None)


# what a field of each annotated kind can never hold (a bool is not a count; a text is not a number or a list)
WRONG = {
    "int": st.one_of(
        st.booleans(), st.floats(allow_nan=True), st.text(max_size=4), st.lists(st.integers(), max_size=2)
    ),
    "float": st.one_of(st.booleans(), st.text(max_size=4), st.lists(st.floats(), max_size=2)),
    "str": st.one_of(st.integers(), st.floats(), st.booleans(), st.lists(st.text(max_size=3), max_size=2)),
    "bool": st.one_of(st.integers(0, 1), st.floats(), st.text(max_size=4)),
    "list[int]": st.one_of(
        st.text(min_size=1, max_size=4),
        st.integers(),
        st.lists(st.one_of(st.booleans(), st.floats(), st.text(max_size=2)), min_size=1, max_size=3).map(
            lambda bad: [2, *bad]
        ),
    ),
    "list[str]": st.one_of(
        st.text(min_size=1, max_size=6), st.lists(st.one_of(st.integers(), st.floats()), min_size=1, max_size=3)
    ),
}
CHECKED = [spec for spec in dataclasses.fields(TracecovConfig) if flags._annotation_text(spec) in WRONG]


@bounded(200)
@given(st.data())
def test_generated_values_of_the_wrong_type_are_refused_for_every_field(tmp_path_factory, data):
    spec = data.draw(st.sampled_from(CHECKED), label="field")
    value = data.draw(WRONG[flags._annotation_text(spec)], label="value")
    folder = tmp_path_factory.mktemp("types")
    with pytest.raises(FieldTypeError, match=rf"^--{spec.name} (must|needs) "):
        TracecovConfig(**{**good(folder), spec.name: value})
    assert not (folder / "out").exists()


def flag_configs() -> list[type]:
    """Every Flags config of the package and the studies (the scripts' configs live there or beside them)."""
    for script in sorted(pathlib.Path(ROOT).glob("scripts/*.py")):  # their configs, imported as modules (no __main__)
        spec = importlib.util.spec_from_file_location(f"script_{script.stem}", script)
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        try:
            spec.loader.exec_module(module)
        except ImportError:
            continue
    for package in (grpo_mse, studies):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional package (vllm, verl) not installed here
                continue
    found, todo = [], [flags.Flags]
    while todo:
        todo.extend(found_class := todo.pop().__subclasses__())
        found.extend(found_class)
    return [c for c in found if dataclasses.is_dataclass(c)]


def test_every_config_s_defaults_pass_its_own_type_check():
    """The checks hold the project's own configs to their annotations: no default of any of them is refused."""
    configs = flag_configs()
    assert {TracecovConfig, OracleConfig} <= set(configs) and len(configs) >= 20
    problems = [
        (
            config.__name__,
            flags.type_problem(spec, spec.default_factory() if callable(spec.default_factory) else spec.default),
        )
        for config in configs
        for spec in dataclasses.fields(config)
        if spec.default is not dataclasses.MISSING or spec.default_factory is not dataclasses.MISSING
    ]
    assert [problem for problem in problems if problem[1]] == []
