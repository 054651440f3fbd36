"""Property-based tests (Hypothesis, derandomized): generated tables and flag values hold one invariant.

Invariant for every generated case: either the command goes on (exit 0 with correct outputs; in-process the
validation layer passes and the run reaches the model), or it stops with exit 2 and exactly one ``error:``
line that names the input, no traceback, nothing written in its output folder and no tracked file changed.

In-process cases call the scripts' own ``main(argv)`` under ``cli.run``'s boundary (stderr captured); the
model load (or the run) is replaced by a sentinel, so a case costs milliseconds. A few subprocess runs check
the same invariant end to end, and the full-disk and changed-model journeys run the real command lines.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import pytest
from conftest import BUILTIN_POLICY, ROOT, load_script, tracecov_argv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_mse import cli


def bounded(examples: int):
    """Derandomized (same cases in CI every time), a bounded number of examples, no deadline, no database."""
    return settings(
        derandomize=True,
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


GOOD_PROMPT = "Solve the arithmetic problem.\n2 + 3 ="
TRACECOV = load_script("Gradient_evaluation/run_tracecov.py")
ORACLE = load_script("Gradient_evaluation/calculate_oracle_v.py")
FIGURES = load_script("plots/make_figures.py")
COUNTS: dict[str, int] = {}  # generated cases per property (docs/safety.md quotes them)


class Reached(Exception):
    """The run got past every input check (raised instead of loading the model)."""


def boundary(main, argv) -> tuple[int, str]:
    """(exit status, stderr) of ``main(argv)`` under cli.run's error boundary; a traceback fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.run(lambda: main(argv))
        except SystemExit as done:
            return done.code, err.getvalue()
    return 0, err.getvalue()


def one_error_line(stderr: str, names: str) -> None:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert names in errors[0], (names, errors[0])


def tracked_state() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module", autouse=True)
def no_tracked_change():
    before = tracked_state()
    yield
    assert tracked_state() == before


# ---- generated table rows -------------------------------------------------------------------------------------

# (value, valid?) pools: the expected verdict is written down here, independently of the code under test.
PROMPTS = [
    (GOOD_PROMPT, True),
    ("  ", False),
    ("", False),
    (7, False),
    (None, False),
    (3.5, False),
    ([], False),
    ([{"role": "user", "content": "2 + 3 = ?"}], True),
    ([{"content": "2 + 3"}], False),
    ([{"role": "user", "content": 5}], False),
    ([{"role": "user", "content": " "}], False),
    (["text"], False),
    ({"role": "user", "content": "2 + 3 ="}, True),
    ("数学 2 + 3 = \u202e", True),
    (True, False),
    ("2 +\u2028 3 =\r", True),
]
GOLDS = [
    (5, True),
    (-12, True),
    (3.0, True),
    (2.5, False),
    (float("nan"), False),
    (float("inf"), False),
    (" 42 ", True),
    ("1,234", True),
    ("abc", False),
    ("", False),
    ("#### 72", False),
    (None, False),
    ([5], False),
    (True, False),
    (10**30, True),
    ("٣", True),
]
VALUES = [
    (0.5, True),
    (0, True),
    (1, True),
    (1.0000001, False),
    (-0.0, True),
    (float("nan"), False),
    (float("inf"), False),
    ("0.5", False),
    (None, False),
    (True, False),
    (2, False),
]
IDS = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.text(max_size=3), st.floats(allow_nan=True), st.booleans())
EXTRA = st.dictionaries(
    st.text(min_size=1, max_size=5).filter(
        lambda k: k not in {"prompt", "ground_truth", "V_oracle", "id", "data_source", "reward_model", "extra_info"}
    ),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.none()),
    max_size=2,
)


@st.composite
def tables(draw):
    """(rows, valid?): 1-3 rows; each field drawn from its pool, sometimes missing; ids repeat or are odd."""
    rows, valid = [], True
    for _ in range(draw(st.integers(1, 3))):
        row = dict(draw(EXTRA))
        for name, pool in (("prompt", PROMPTS), ("ground_truth", GOLDS), ("V_oracle", VALUES)):
            if draw(st.integers(0, 9)) == 0:  # missing field
                valid = False
                continue
            value, ok = draw(st.sampled_from(pool))
            row[name], valid = value, valid and ok
        if draw(st.booleans()):
            row["id"] = draw(IDS)
        rows.append(row)
    return rows, valid


def write_table(folder: str, rows: list, form: str) -> str:
    path = os.path.join(folder, f"t.{form}")
    if form == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)  # raw unicode, U+2028 included
    else:
        text = json.dumps(rows, ensure_ascii=False)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def tiny_tracecov_argv(table: str, out: str, *flags) -> list[str]:
    return tracecov_argv(table, out, *flags, T=3, M=2, K_list=2, max_new_tokens=2)


@bounded(120)
@given(tables(), st.sampled_from(["jsonl", "json"]))
def test_generated_tables_are_run_or_refused_in_one_line(case, form):
    rows, valid = case
    COUNTS["tables"] = COUNTS.get("tables", 0) + 1
    with tempfile.TemporaryDirectory() as folder, mock.patch("grpo_mse.runs.tracecov.load_policy", side_effect=Reached):
        table, out = write_table(folder, rows, form), os.path.join(folder, "out")
        try:
            code, stderr = boundary(TRACECOV.main, tiny_tracecov_argv(table, out))
        except Reached:
            code, stderr = None, ""
        assert (code is None) == valid, (rows, code, stderr)
        if not valid:
            assert code == 2
            one_error_line(stderr, table)
        assert not os.path.exists(out)  # nothing is written before the model loads


# ---- generated flag values ------------------------------------------------------------------------------------


def text_of(value) -> str:
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


NUMBERS = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "", "abc", "0x10", "1_000", "٣"]),
)
INT_FLAGS = {"--T": 1, "--M": 2, "--c1_batch": 2, "--max_new_tokens": 1, "--gen_bs": 1}


def parse_int(text: str):
    try:
        return int(text)
    except ValueError:
        return None


def parse_float(text: str):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def flag_ok(flag: str, text: str) -> bool:
    """The documented range of each flag (docs/safety.md), written independently of the config code."""
    if flag in INT_FLAGS:
        value = parse_int(text)
        return value is not None and value >= INT_FLAGS[flag]
    if flag == "--seed":
        value = parse_int(text)
        return value is not None and 0 <= value <= 2**32 - 1
    if flag == "--budget":
        value = parse_int(text)
        return value is not None and value >= 2 and value % 2 == 0
    value = parse_float(text)
    if flag == "--temperature":
        return value is not None and 0.01 <= value <= 100
    return value is not None and 0 < value <= 1  # --top_p


@bounded(150)
@given(
    st.sampled_from([*INT_FLAGS, "--seed", "--budget", "--temperature", "--top_p"]),
    NUMBERS,
    st.sampled_from(["tracecov", "oracle"]),
)
def test_generated_flag_values_are_run_or_refused_in_one_line(flag, value, script):
    if script == "oracle" and flag not in ("--seed", "--temperature", "--top_p", "--max_new_tokens"):
        flag = "--seed"
    text = text_of(value)
    COUNTS["flags"] = COUNTS.get("flags", 0) + 1
    with tempfile.TemporaryDirectory() as folder:
        table = write_table(folder, [{"id": 0, "prompt": GOOD_PROMPT, "ground_truth": 5, "V_oracle": 0.5}], "jsonl")
        out = os.path.join(folder, "out")
        if script == "tracecov":
            main, target = TRACECOV.main, "grpo_mse.runs.tracecov.run_tracecov"
            argv = [*tiny_tracecov_argv(table, out), flag, text]
        else:
            main, target = ORACLE.main, "grpo_mse.runs.oracle.run_oracle"
            argv = ["--model", BUILTIN_POLICY, "--dataset", table, "--device", "cpu", "--out_dir", out, flag, text]
        with mock.patch(target, side_effect=Reached):
            try:
                code, stderr = boundary(main, argv)
            except Reached:
                code, stderr = None, ""
        assert (code is None) == flag_ok(flag, text), (flag, text, code, stderr)
        if code is not None:
            assert code == 2
            one_error_line(stderr, flag)
        assert not os.path.exists(out)


# ---- generated --paper CSVs for make_figures ------------------------------------------------------------------

CELLS = {
    "K": [("4", True), ("8", True), ("4.5", False), ("0", False), ("four", False), ("", False), ("1e3", True)],
    "estimator": [("vanilla", True), ("grpo", True), ("oracle", True), ("naive", False), ("", False)],
    "mse": [("4.88e5", True), ("0", True), ("abc", False), ("nan", False), ("-1", False), ("inf", False)],
}


@st.composite
def paper_csvs(draw):
    columns = ["model", "K", "estimator", "mse", "ci_halfwidth"]
    valid = True
    if draw(st.integers(0, 5)) == 0:
        columns.remove(draw(st.sampled_from(["K", "estimator", "mse"])))
        valid = False
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        cells = {"model": draw(st.sampled_from(["Base", "Ins,truct", "数"])), "ci_halfwidth": "0.1"}
        for column, pool in CELLS.items():
            value, ok = draw(st.sampled_from(pool))
            cells[column] = value
            valid = valid and (ok or column not in columns)
        lines.append(cells)
    valid = valid and bool(lines)
    bom = draw(st.booleans())
    return columns, lines, bom, valid


@bounded(40)
@given(paper_csvs())
def test_generated_paper_csvs_are_drawn_or_refused_in_one_line(case):
    import csv

    columns, lines, bom, valid = case
    COUNTS["paper"] = COUNTS.get("paper", 0) + 1
    with tempfile.TemporaryDirectory() as folder:
        path, out = os.path.join(folder, "p.csv"), os.path.join(folder, "figs")
        with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(lines)
        with mock.patch.object(FIGURES, "figure4", return_value=[os.path.join(out, "figure4.png")]) as draw:
            code, stderr = boundary(FIGURES.main, ["--paper", path, "--out_dir", out])
        assert (code == 0) == valid, (columns, lines, code, stderr)
        if valid:  # the panels hold exactly the values of the file
            runs = draw.call_args[0][0]
            got = {
                (label, k, name, value)
                for label, result in runs
                for name, values in result["conditional_on_x"].items()
                for k, value in zip(result["K_list"], values)
                if value == value
            }
            names = {"vanilla": "naive", "grpo": "grpo", "oracle": "oracleV"}
            assert got == {
                (f"paper: {c['model']}", int(float(c["K"])), names[c["estimator"]], float(c["mse"]))
                for c in {(c["model"], c["K"], c["estimator"]): c for c in lines}.values()
            }
        else:
            assert code == 2
            one_error_line(stderr, path)
        assert not os.path.exists(out)


# ---- end to end (subprocess): the real command lines ----------------------------------------------------------


def run(script: str, *args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
        timeout=600,
    )


@pytest.mark.slow
def test_generated_like_tables_end_to_end(tmp_path):
    """A valid table with repeated ids, unicode and non-finite extra fields runs (finite JSON out); a bad one
    stops in one line with nothing written."""
    rows = [
        {"id": 3, "prompt": GOOD_PROMPT, "ground_truth": 5, "V_oracle": 0.5, "note": float("nan"), "ünï": "数"},
        {"id": 3, "prompt": "Solve the arithmetic problem.\n1 + 1 =", "ground_truth": "2", "V_oracle": 1},
    ]
    good = write_table(str(tmp_path), rows, "jsonl")
    done = run("Gradient_evaluation/run_tracecov.py", *tiny_tracecov_argv(good, str(tmp_path / "out"), "--T", "2"))
    assert done.returncode == 0, done.stderr
    main = [p for p in os.listdir(tmp_path / "out") if p.endswith(".json") and "_K" not in p]
    with open(tmp_path / "out" / main[0], encoding="utf-8") as handle:
        result = json.loads(handle.read(), parse_constant=lambda c: pytest.fail(f"non-finite {c} in JSON"))
    assert result["n_prompts"] == [2] and not [p for p in os.listdir(tmp_path / "out") if "progress" in p]
    bad = tmp_path / "bad"
    bad.mkdir()
    table = write_table(str(bad), [{**rows[0], "prompt": [{"content": "x"}]}], "jsonl")
    done = run("Gradient_evaluation/run_tracecov.py", *tiny_tracecov_argv(table, str(bad / "out")))
    assert done.returncode == 2
    one_error_line(done.stderr, table)
    assert not (bad / "out").exists()


FULL_DISK = """
import builtins, errno, io, os, sys, runpy
from grpo_mse.tables import outputs
calls = []
class Full(io.StringIO):
    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")
def open_(path, mode="r", *args, **kwargs):
    if "a" in mode:
        calls.append(path)
        if len(calls) == int(os.environ["FAIL_AT"]):  # the disk is full: the write fails, as on a real disk
            return Full()
    return builtins.open(path, mode, *args, **kwargs)
outputs.open = open_
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_full_disk_is_one_line_and_resume_finishes(tmp_path):
    table = write_table(
        str(tmp_path), [{"id": i, "prompt": GOOD_PROMPT, "ground_truth": 5, "V_oracle": 0.5} for i in range(2)], "jsonl"
    )
    argv = tiny_tracecov_argv(table, str(tmp_path / "out"), "--T", "2")
    script = os.path.join(ROOT, "Gradient_evaluation/run_tracecov.py")
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, script, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "FAIL_AT": "3"},
        timeout=600,
    )  # the 2nd prompt
    assert done.returncode == 2, done.stderr
    one_error_line(done.stderr, "no space left on the device: ")
    assert "--resume" in done.stderr and ".progress.rank0.jsonl" in done.stderr
    resumed = run("Gradient_evaluation/run_tracecov.py", *argv, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "1 prompt results already done" in resumed.stderr
    left = os.listdir(tmp_path / "out")
    assert not [p for p in left if "progress" in p or p.startswith(".tmp_")], left  # nothing half-written
    assert len([p for p in left if p.endswith(".json") and "_K" not in p]) == 1


def test_resume_refuses_a_changed_model_folder(tmp_path):
    """A bit-identical copy of the model resumes; one changed byte in the weights (size and mtime kept) or a
    changed tokenizer file is refused, naming model_fingerprint."""
    model = tmp_path / "m"
    shutil.copytree(BUILTIN_POLICY, model)
    table = write_table(
        str(tmp_path), [{"id": i, "prompt": GOOD_PROMPT, "ground_truth": 5, "V_oracle": 0.5} for i in range(2)], "jsonl"
    )
    out = tmp_path / "out"
    out.mkdir()
    from grpo_mse.config.gradient_evaluation import TracecovConfig

    argv = tiny_tracecov_argv(table, str(out))
    argv[argv.index("--model") + 1] = str(model)
    config = TracecovConfig.from_argv(argv)
    header = {
        "config": {
            **config.record(),
            "oracle_table_fingerprint": __import__("grpo_mse.tables.resume", fromlist=["fingerprint"]).fingerprint(
                table
            ),
        }
    }
    (out / "tracecov_m_20260101_000000.progress.rank0.jsonl").write_text(json.dumps(header) + "\n")
    from grpo_mse.runs.folder import RunFolder

    def find_resumable(save_dir: str, current: dict) -> str | None:
        folder = RunFolder(
            save_dir, "tracecov_", ".progress.rank0.jsonl", TracecovConfig.RESULT_FIELDS, settings_in_marker=True
        )
        return folder.resumable(current)

    saved = header["config"]
    assert find_resumable(str(out), saved)  # the same folder: resumable
    weights = model / "model.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    changed = TracecovConfig.from_argv(argv)
    with pytest.raises(cli.UsageError, match="model_fingerprint"):
        find_resumable(str(out), {**saved, "model_fingerprint": changed.model_fingerprint})
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert TracecovConfig.from_argv(argv).model_fingerprint == saved["model_fingerprint"]
    with open(model / "tokenizer_config.json", "a", encoding="utf-8") as handle:
        handle.write(" ")
    assert TracecovConfig.from_argv(argv).model_fingerprint != saved["model_fingerprint"]


def test_same_model_named_two_ways_is_one_model(tmp_path):
    from grpo_mse.config.gradient_evaluation import OracleConfig
    from grpo_mse.tables.inputs import oracle_settings, settings_mismatch

    relative = os.path.relpath(BUILTIN_POLICY)
    config = OracleConfig.from_argv(["--model", relative, "--dataset", "t.jsonl", "--out_dir", str(tmp_path)])
    rows = [{"oracle_settings": oracle_settings(config, 4)}]
    run_settings = {
        "model": BUILTIN_POLICY,
        "revision": "main",
        "temperature": 1.0,
        "top_p": 0.95,
        "max_new_tokens": 32,
        "model_fingerprint": config.model_fingerprint,
    }
    assert settings_mismatch(rows, run_settings) is None
    assert "model_fingerprint" in settings_mismatch(rows, {**run_settings, "model_fingerprint": "sha256:0"})


def test_counts_reported():
    """Runs last: prints how many cases each property generated (quoted in docs/safety.md)."""
    print("generated cases:", json.dumps(COUNTS))


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
    cli.check_model_path(str(model))  # the intact copy passes
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
    with pytest.raises(cli.UsageError, match=needle):
        cli.check_model_path(str(model))


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

    from grpo_mse.analysis import bootstrap as bs

    one = bs.prompt_weights(1, 50, seed=0)
    assert bs.interval(np.full(len(one), 0.3), one) is None  # [x, x] would claim certainty: n/a
    two = bs.prompt_weights(2, 50, seed=0)
    draws = two @ np.array([0.2, 0.4]) / two.sum(axis=1)
    low, high = bs.interval(draws, two)
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
    from grpo_mse.figures import tracecov as figures

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


@pytest.mark.slow
def test_oracle_full_disk_then_resume_equals_an_uninterrupted_run(tmp_path):
    rows = [{"id": i, "prompt": GOOD_PROMPT, "ground_truth": 5} for i in range(2)]
    table = write_table(str(tmp_path), rows, "jsonl")

    def argv(out):
        return [
            "--model",
            BUILTIN_POLICY,
            "--dataset",
            table,
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--n_oracle",
            "3",
            "--max_new_tokens",
            "3",
            "--out_dir",
            str(tmp_path / out),
        ]

    script = os.path.join(ROOT, "Gradient_evaluation/calculate_oracle_v.py")
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, script, *argv("a")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "FAIL_AT": "2"},
        timeout=600,
    )
    assert done.returncode == 2, done.stderr
    one_error_line(done.stderr, "no space left on the device: ")
    assert "--resume" in done.stderr
    assert run("Gradient_evaluation/calculate_oracle_v.py", *argv("a"), "--resume").returncode == 0
    assert run("Gradient_evaluation/calculate_oracle_v.py", *argv("b")).returncode == 0

    def table_of(out):
        [name] = [n for n in os.listdir(tmp_path / out) if n.endswith(".jsonl")]
        with open(tmp_path / out / name, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    assert table_of("a") == table_of("b") and len(table_of("a")) == 2
