"""The typed results of the two runs (issue 44 item 3): ``run_oracle`` returns an ``OracleOutcome`` and
``run_tracecov`` a ``TracecovOutcome``, chained as a user chains the command lines (the oracle's table feeds the
tracecov run), on the shipped tiny policy. Each field is checked against the files the run wrote: the outcome
says what is on disk, not what the run meant to write."""

import csv
import json

from conftest import BUILTIN_POLICY, tracecov_argv

from grpo_mse.analysis.advisor import GroupSizeAdvice
from grpo_mse.analysis.paired import RunStatistics
from grpo_mse.config.gradient_evaluation import OracleConfig, TracecovConfig
from grpo_mse.runs.oracle import OracleOutcome, run_oracle
from grpo_mse.runs.tracecov import TracecovOutcome, run_tracecov
from grpo_mse.tables.outputs import read_complete_jsonl, to_json


def test_the_oracle_and_tracecov_runs_return_what_they_wrote(tmp_path):
    rows = [{"id": i, "prompt": f"What is {i} + {i + 1}?", "ground_truth": str(2 * i + 1)} for i in range(5)]
    table = tmp_path / "rows.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = {"model": BUILTIN_POLICY, "device": "cpu", "dtype": "fp32", "seed": 3}

    oracle = run_oracle(OracleConfig(**common, dataset=str(table), n_oracle=6, limit=4, out_dir=str(tmp_path / "v")))
    assert isinstance(oracle, OracleOutcome)
    written = read_complete_jsonl(oracle.path)
    assert (oracle.new, oracle.selected, oracle.total) == (4, 4, len(written)) == (4, 4, 4)
    assert [r["id"] for r in written] == [0, 1, 2, 3] and oracle.seconds > 0

    again = run_oracle(OracleConfig(**common, dataset=str(table), n_oracle=6, out_dir=str(tmp_path / "v"), resume=True))
    assert again.path == oracle.path and (again.new, again.selected, again.total) == (1, 5, 5)  # one row left to do

    argv = tracecov_argv(oracle.path, tmp_path / "t", T=5, M=2, K_list=(2, 3), c1_batch=5)
    outcome = run_tracecov(TracecovConfig.from_argv(argv))
    assert isinstance(outcome, TracecovOutcome)
    with open(outcome.json_path, encoding="utf-8") as handle:
        assert json.load(handle) == json.loads(to_json(outcome.result))  # the main JSON (NaN saved as null)
    with open(outcome.csv_path, encoding="utf-8") as handle:
        per_prompt = list(csv.DictReader(handle))
    assert len(per_prompt) == 5 * 2 * len(outcome.result["config"]["estimators"])  # a row per prompt, K, estimator
    assert outcome.json_path.startswith(str(tmp_path / "t")) and outcome.result["K_list"] == [2, 3]

    assert isinstance(outcome.statistics, RunStatistics)
    assert isinstance(outcome.statistics.group_size_advisor, GroupSizeAdvice)  # the advisor is on by default
    for key, value in outcome.statistics.to_json().items():  # the typed statistics are what the JSON holds
        assert json.loads(to_json(value)) == json.loads(to_json(outcome.result[key])), key
