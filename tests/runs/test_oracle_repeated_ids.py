"""The oracle's resume on a table whose ids repeat (as real datasets' do): the rows are keyed by the whole
table's rule (id when every id is distinct, else the table position), so a --limit 2 run resumed with --limit 6
writes each of the 6 rows once, with the samples a fresh --limit 6 run draws."""

import json

import pytest
from conftest import BUILTIN_POLICY, ROOT

from grpo_mse.commands import oracle as oracle_command

DATA = f"{ROOT}/data/arithmetic_zero_shot.jsonl"


def rows_of(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


@pytest.mark.slow
def test_limit_then_resume_on_repeated_ids_writes_each_row_once(tmp_path):
    table = rows_of(DATA)[:6]
    for row, repeated in ((table[4], 0), (table[5], 1)):  # rows 4 and 5 repeat the ids of rows 0 and 1
        row["id"] = table[repeated]["id"]
    data = tmp_path / "table.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in table), encoding="utf-8")
    oracle = oracle_command
    common = ["--model", BUILTIN_POLICY, "--dataset", str(data), "--device", "cpu", "--dtype", "fp32"]
    common += ["--n_oracle", "8", "--max_new_tokens", "4", "--batch_size", "8"]
    oracle.main([*common, "--limit", "2", "--out_dir", str(tmp_path / "resumed")])
    oracle.main([*common, "--limit", "6", "--out_dir", str(tmp_path / "resumed"), "--resume"])
    oracle.main([*common, "--limit", "6", "--out_dir", str(tmp_path / "fresh")])
    (resumed,), (fresh,) = (list((tmp_path / d).glob("*.jsonl")) for d in ("resumed", "fresh"))
    resumed_rows, fresh_rows = rows_of(resumed), rows_of(fresh)
    assert [r["row_index"] for r in resumed_rows] == list(range(6))  # was 8 rows: 2 keyed by id, then 6 by position
    assert [r["correct_count"] for r in resumed_rows] == [r["correct_count"] for r in fresh_rows]
    assert [r["prompt"] for r in resumed_rows] == [r["prompt"] for r in table]


@pytest.mark.slow
def test_a_file_keyed_by_id_is_not_resumed_by_position(tmp_path):
    """A file written before the fix (a prefix of distinct ids keyed by id) is refused, not appended to."""
    table = rows_of(DATA)[:3]
    table[2]["id"] = table[0]["id"]
    data = tmp_path / "table.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in table), encoding="utf-8")
    oracle = oracle_command
    common = ["--model", BUILTIN_POLICY, "--dataset", str(data), "--device", "cpu", "--dtype", "fp32"]
    common += ["--n_oracle", "4", "--max_new_tokens", "4", "--out_dir", str(tmp_path / "out")]
    oracle.main([*common, "--limit", "2"])
    (path,) = (tmp_path / "out").glob("*.jsonl")
    old = [{k: v for k, v in r.items() if k != "row_index"} for r in rows_of(path)]  # as the old code wrote it
    path.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(Exception, match="its rows have no 'row_index'"):
        oracle.main([*common, "--resume"])
    assert path.read_bytes() == before
