"""The invariant of the property tests end to end, through the real command lines: generated-like tables, a
full disk then a resume, a changed model folder refused on resume, one model named two ways."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import BUILTIN_POLICY, ROOT
from one_line_checks import GOOD_PROMPT, no_tracked_change, one_error_line, run, tiny_tracecov_argv, write_table  # noqa: F401 (autouse fixture)

from grpo_mse.errors import UsageError


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
    from grpo_mse.tables.resume import RunFolder

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
    with pytest.raises(UsageError, match="model_fingerprint"):
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
