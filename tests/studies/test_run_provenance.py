"""scripts/compare_tracecov_runs.py on real runs of the shipped tiny policy (issue 54 item 3): runs of other prompts
or another model are refused (exit 2, one line), a CSV that is not its run's own is refused, a copy with every
trace times 3 or with two estimators' labels swapped does not agree, the committed demo CSV (written before the
prompt_hash column) still compares, and columns a later version adds are ignored.

Before issue 54 the first three said "agree" (exit 0): zero-shot against few-shot |z| 1.34, x3 1.67, swapped 1.52,
all under the limit 3.76 (T 8, M 2, K 2 4)."""

import csv
import json
import shutil
from pathlib import Path

import pytest
from conftest import tracecov_argv
from one_line_checks import run as run_script_file

from grpo_mse.config.gradient_evaluation import TracecovConfig
from grpo_mse.runs.tracecov import run_tracecov

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "results" / "demo"
DEMO_TABLE = next(DEMO.glob("oracle_v_n*.jsonl"))
DEMO_CSV = next(DEMO.glob("tracecov_*_per_prompt.csv"))


def compare(*argv):
    return run_script_file("scripts/compare_tracecov_runs.py", *map(str, argv), cwd=ROOT)


def run(table, out):
    """The tiny policy's run on ``table``, T 8, M 2, K 2 4 (seconds): its per-prompt CSV."""
    argv = tracecov_argv(table, out, "--no_advisor", T=8, M=2, K_list=(2, 4), max_memory_gb=3)
    return Path(run_tracecov(TracecovConfig.from_argv(argv)).csv_path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same command on the committed zero-shot oracle table, twice, and on a few-shot table with the same ids
    and V (the few-shot prompts of data/arithmetic_few_shot.jsonl): three per-prompt CSVs."""
    folder = tmp_path_factory.mktemp("runs")
    few_shot = {row["id"]: row["prompt"] for row in map(json.loads, (ROOT / "data/arithmetic_few_shot.jsonl").open())}
    rows = [json.loads(line) for line in DEMO_TABLE.open()]
    table = folder / "few_shot_oracle.jsonl"
    table.write_text("".join(json.dumps({**row, "prompt": few_shot[row["id"]]}) + "\n" for row in rows))
    return run(DEMO_TABLE, folder / "zero"), run(DEMO_TABLE, folder / "again"), run(table, folder / "few")


def edited_copy(csv_path, folder, change, with_json):
    """A copy of a run's CSV with ``change`` applied to each row; beside a copy of its JSON when ``with_json``."""
    folder.mkdir()
    target = folder / csv_path.name
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows = [change(dict(row)) for row in rows]
    with target.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    if with_json:
        name = csv_path.name.replace("_per_prompt.csv", ".json")
        shutil.copy(csv_path.parent / name, folder / name)
    return target


def refused(done, words):
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr


def without_hash(row):
    """A row as run_tracecov.py wrote it before the prompt_hash column."""
    return {key: value for key, value in row.items() if key != "prompt_hash"}


def times_three(row):
    return {**row, "trace": repr(3 * float(row["trace"]))}


def swap_labels(row):
    return {**row, "estimator": {"naive": "grpo", "grpo": "naive"}.get(row["estimator"], row["estimator"])}


def test_other_prompts_are_refused_and_a_rerun_of_the_same_command_agrees(runs, tmp_path):
    zero, again, few = runs
    refused(compare(zero, few), "hold different prompts under id")
    done = compare(zero, again, "--rtol", "0.01")  # the same seed: the same draws, a rerun
    assert done.returncode == 0 and done.stdout.rstrip().endswith(": agree") and done.stderr == "", done.stderr
    done = compare(zero, again)  # identical traces: agree, or cannot tell where a cell has under 2 traces > 0
    assert done.returncode in (0, 3) and "DISAGREE" not in done.stdout, done.stdout
    # the CSVs as written before the prompt_hash column, beside their JSONs: the tables' fingerprints differ
    no_hash = [edited_copy(path, tmp_path / name, without_hash, True) for path, name in ((zero, "zero"), (few, "few"))]
    refused(compare(*no_hash), "are runs of different oracle tables")
    # a CSV copied alone (no JSON): its prompts' hashes still tell the tables apart
    alone = edited_copy(few, tmp_path / "alone", lambda r: r, False)
    refused(compare(zero, alone), "hold different prompts under id")


def test_every_trace_times_three_does_not_agree(runs, tmp_path):
    zero, _, _ = runs
    extra = {"mean_generated_tokens": "5.0"}  # a column a later version adds: ignored
    alone = edited_copy(zero, tmp_path / "alone", lambda r: {**times_three(r), **extra}, False)
    done = compare(alone, zero)
    assert done.returncode == 1 and "DISAGREE" in done.stdout and ": agree" not in done.stdout, done.stdout
    assert "the models are not checked" in done.stderr  # the copy has no JSON beside it
    beside = edited_copy(zero, tmp_path / "beside", times_three, True)
    refused(compare(beside, zero), "is not the run of")


def test_swapped_estimator_labels_do_not_agree(runs, tmp_path):
    zero, _, _ = runs
    done = compare(edited_copy(zero, tmp_path / "alone", swap_labels, False), zero)
    assert done.returncode in (1, 3) and ": agree" not in done.stdout, done.stdout
    refused(compare(edited_copy(zero, tmp_path / "beside", swap_labels, True), zero), "is not the run of")


def test_another_model_is_refused(runs, tmp_path):
    zero, again, _ = runs
    other = edited_copy(again, tmp_path / "other", lambda r: r, True)
    run_json = other.with_name(other.name.replace("_per_prompt.csv", ".json"))
    saved = json.loads(run_json.read_text())
    saved["config"]["model_fingerprint"] = "sha256:" + "0" * 64
    run_json.write_text(json.dumps(saved))
    refused(compare(zero, other), "are runs of different models")


def test_the_committed_demo_csv_still_compares(runs):
    """results/demo's CSV predates prompt_hash: its JSON's table fingerprint shows the prompts are the same."""
    zero, _, _ = runs
    done = compare(zero, DEMO_CSV, "--shared_prompts")
    assert done.returncode in (0, 1, 3) and "not checked" not in done.stderr, done.stderr
    assert "compared on the shared ones" in done.stdout
