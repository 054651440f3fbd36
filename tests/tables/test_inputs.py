import json

import pandas as pd
import pytest

from grpo_mse.errors import DataError
from grpo_mse.tables.inputs import has_unique_ids, load_rows, prompt_text, row_keys

ROWS = [
    {"id": 0, "prompt": [{"role": "user", "content": "1 + 1 ="}], "ground_truth": 2},
    {"id": 1, "prompt": "plain 2 + 2 =", "ground_truth": 4},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_jsonl_parquet_and_folders_give_the_same_rows(tmp_path):
    from_jsonl = load_rows(_jsonl(tmp_path / "d.jsonl", ROWS))
    pd.DataFrame(ROWS[:1] * 2).to_parquet(tmp_path / "d.parquet")
    from_parquet = load_rows(str(tmp_path / "d.parquet"))
    assert from_jsonl == ROWS
    assert from_parquet[0] == ROWS[0] and isinstance(from_parquet[0]["prompt"], list)
    assert isinstance(from_parquet[0]["ground_truth"], int)
    folder = tmp_path / "folder"
    folder.mkdir()
    _jsonl(folder / "test.jsonl", ROWS)
    assert load_rows(str(folder), split="test") == ROWS
    with pytest.raises(DataError, match="--split test selects a split of a dataset folder"):
        load_rows(str(tmp_path / "d.jsonl"), split="test")  # refused, not silently the whole file


def test_saved_dataset_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:1])}).save_to_disk(str(tmp_path / "saved"))
    assert load_rows(str(tmp_path / "saved"))[0]["ground_truth"] == 2
    with pytest.raises(DataError, match="split 'dev' not found"):
        load_rows(str(tmp_path / "saved"), split="dev")


def test_a_single_saved_dataset_with_split_is_refused_as_a_single_file_is(tmp_path):
    """Issue 36, case 4: --split test on one saved Dataset (no splits) ran on all of it and recorded split "test"."""
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(ROWS[:1] * 2).save_to_disk(str(tmp_path / "one"))
    assert load_rows(str(tmp_path / "one")) == load_rows(str(tmp_path / "one"), split="train")  # the default: all rows
    with pytest.raises(DataError, match="--split test selects a split .* holds one saved Dataset without splits"):
        load_rows(str(tmp_path / "one"), split="test")


@pytest.mark.parametrize("name", ["rows.xlsx", "rows.csv", "data/rows.TSV", "prompts.txt"])
def test_a_missing_file_of_another_format_is_not_taken_for_a_hub_id(name, monkeypatch, tmp_path):
    """A missing ``rows.xlsx`` was sent to the hub, whose five retries (about 23 s offline) came before the refusal."""
    import grpo_mse.tables.formats as formats

    def no_hub(source, split):
        raise AssertionError(f"{source} was looked up on the hub")

    monkeypatch.setattr(formats, "read_hub", no_hub)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=f"file not found: {name}$"):
        load_rows(name)
    with pytest.raises(AssertionError, match="looked up on the hub"):
        load_rows("openai/gsm8k")  # a hub id still goes to the hub (here: the stand-in that refuses it)


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(DataError, match="file not found: .*missing.jsonl"):
        load_rows(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(DataError, match="malformed JSON on line 2"):
        load_rows(str(bad))
    no_gold = _jsonl(tmp_path / "nogold.jsonl", [{"prompt": "x"}])
    with pytest.raises(DataError, match="row 0 has no 'ground_truth' field"):
        load_rows(no_gold)
    with pytest.raises(DataError, match="has no 'V_oracle' field"):
        load_rows(_jsonl(tmp_path / "nov.jsonl", ROWS), required=("prompt", "ground_truth", "V_oracle"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="no rows"):
        load_rows(str(empty))


def test_stream_keys_use_unique_ids_else_positions():
    assert row_keys([{"id": 7}, {"id": 3}]) == [7, 3]
    assert row_keys([{"id": 7}, {"id": 7}]) == [0, 1]
    assert not has_unique_ids([{"id": "a"}, {"id": "b"}])


class _NoTemplate:
    chat_template = None


def test_message_list_needs_a_chat_template():
    assert prompt_text(_NoTemplate(), "plain") == "plain"
    with pytest.raises(DataError, match="no chat template"):
        prompt_text(_NoTemplate(), [{"role": "user", "content": "hi"}])
