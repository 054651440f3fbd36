"""Bad input: one-line error naming the problem, non-zero exit, no output file left behind."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import BUILTIN_POLICY, ROOT, tracecov_argv

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)

ORACLE = os.path.join(ROOT, "Gradient_evaluation", "calculate_oracle_v.py")
TRACECOV = os.path.join(ROOT, "Gradient_evaluation", "run_tracecov.py")
ROW = {
    "id": 0,
    "prompt": [{"role": "user", "content": "Solve the arithmetic problem.\n2 + 3 ="}],
    "ground_truth": 5,
    "V_oracle": 0.5,
}


def _run(script, *args):
    return subprocess.run([sys.executable, script, *map(str, args)], capture_output=True, text=True, timeout=120)


def _table(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _assert_one_line_error(result, *needles):
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr[-2000:]
    for needle in needles:
        assert needle in last, last
    assert "Traceback" not in result.stderr


def _tracecov(tmp_path, table, *extra):
    out = tmp_path / "out"
    result = _run(TRACECOV, *tracecov_argv(table, out, *extra, T=2, M=2, K_list=2))
    return result, out


@pytest.fixture(autouse=True)
def _needs_policy(builtin_policy):
    return builtin_policy


@pytest.mark.parametrize(
    "bad_row, needle",
    [
        ({k: v for k, v in ROW.items() if k != "prompt"}, "no 'prompt' field"),
        ({k: v for k, v in ROW.items() if k != "ground_truth"}, "no 'ground_truth' field"),
        ({k: v for k, v in ROW.items() if k != "V_oracle"}, "no 'V_oracle' field"),
    ],
)
def test_missing_fields(tmp_path, bad_row, needle):
    result, out = _tracecov(tmp_path, _table(tmp_path / "t.jsonl", [ROW, bad_row]))
    _assert_one_line_error(result, needle, "row 1")
    assert not out.exists()


def test_missing_file_and_malformed_line(tmp_path):
    result, out = _tracecov(tmp_path, tmp_path / "nope.jsonl")
    _assert_one_line_error(result, "file not found", "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROW) + "\n" + json.dumps(ROW) + "\n{oops\n")
    result, out = _tracecov(tmp_path, bad)
    _assert_one_line_error(result, "malformed JSON on line 3")
    assert not out.exists()
    result = _run(ORACLE, "--model", BUILTIN_POLICY, "--dataset", bad, "--device", "cpu", "--out_dir", tmp_path / "o")
    _assert_one_line_error(result, "line 3")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "flags, needle", [(["--M", 1], "--M must be >= 2"), (["--K_list", 4, 1], "K_list must be >= 2")]
)
def test_m_and_k_below_two(tmp_path, flags, needle):
    result, out = _tracecov(tmp_path, _table(tmp_path / "t.jsonl", [ROW]), *flags)
    _assert_one_line_error(result, needle)
    assert not out.exists()


def test_message_prompt_without_chat_template(tmp_path):
    model = tmp_path / "no_template"
    shutil.copytree(BUILTIN_POLICY, model)
    (model / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    table = _table(tmp_path / "t.jsonl", [ROW])
    result = _run(TRACECOV, *tracecov_argv(table, tmp_path / "out", model=model, M=2, K_list=2))
    _assert_one_line_error(result, "no chat template")
    assert not (tmp_path / "out").exists()
    result = _run(ORACLE, "--model", model, "--dataset", table, "--device", "cpu", "--out_dir", tmp_path / "o")
    _assert_one_line_error(result, "no chat template")
    assert not (tmp_path / "o").exists()


def test_cuda_request_without_cuda_and_missing_model(tmp_path):
    table = _table(tmp_path / "t.jsonl", [ROW])
    result = _run(
        TRACECOV, "--model", BUILTIN_POLICY, "--oracle_table", table, "--save_json", tmp_path / "out", "--skip_plot"
    )
    _assert_one_line_error(result, "CUDA is not available")
    result = _run(
        TRACECOV,
        "--model",
        tmp_path / "nomodel",
        "--oracle_table",
        table,
        "--device",
        "cpu",
        "--save_json",
        tmp_path / "out",
        "--skip_plot",
    )
    _assert_one_line_error(result, "model folder not found")
    assert not (tmp_path / "out").exists()
