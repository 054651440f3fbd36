"""The saved records (grpo_mse.tables.records): JSON round trips, the key order of lines saved by earlier runs
(format stability: a resumed run and the per-K files must read and write the same bytes), and refusals."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.errors import DataError
from grpo_mse.tables.outputs import to_json
from grpo_mse.tables.records import (
    TIDY_COLUMNS,
    C1BatchRecord,
    OracleValues,
    PromptRecord,
    oracle_count,
    oracle_value,
    prompt_hash,
)

# Lines saved by real runs (prompt_results of results/training_demo/advisor, results/theory and
# results/advisor_check/train_policy_run), one per shape: unbiased estimators only (||E s||^2 not measured: null),
# std-GRPO with its own target, vanilla biased by top_p < 1.
SAVED_PROMPT_LINES = [
    '{"K": 2, "prompt_index": 12, "id": 12, "prompt": [{"role": "user", "content": "Solve the arithmetic problem. '
    'Return ONLY the final integer.\\n76 * 9 ="}], "gold": 684, "V_oracle": 0.0, "mean_reward": 0.0, "tr_cov": '
    '{"naive": 0.0, "grpo": 0.0, "oracleV": 0.0}, "mean_score_sq": null, "oracle_noise": 0.0}',
    '{"K": 2, "prompt_index": 5, "id": 76, "prompt": [{"role": "user", "content": "Solve the arithmetic problem. '
    'Return ONLY the final integer.\\n89 - 28 - 23 - 35 ="}], "gold": 3, "V_oracle": 0.011426497240587492, '
    '"mean_reward": 0.0, "tr_cov": {"naive": 0.0, "grpo": 0.0, "oracleV": 0.22949032336701816, "grpo_std": 0.0, '
    '"drgrpo": 0.0}, "bias2": {"grpo_std": -0.0029459590195603726, "drgrpo": -0.0029459590195603726}, "mse": '
    '{"naive": 0.0, "grpo": 0.0, "oracleV": 0.22949032336701816, "grpo_std": -0.0029459590195603726, "drgrpo": '
    '-0.0029459590195603726}, "mean_score_sq": -22.56318808111419, "oracle_noise": 0.0, "bias2_own": {"grpo_std": '
    '-0.2607982143659752}, "mse_own": {"grpo_std": -0.2607982143659752}}',
    '{"K": 8, "prompt_index": 12, "id": 12, "prompt": [{"role": "user", "content": "Solve the arithmetic problem. '
    'Return ONLY the final integer.\\n76 * 9 ="}], "gold": 684, "V_oracle": 0.0, "mean_reward": 0.0, "tr_cov": '
    '{"naive": 0.0, "grpo": 0.0, "oracleV": 0.0}, "bias2": {"naive": 0.0}, "mse": {"naive": 0.0, "grpo": 0.0, '
    '"oracleV": 0.0}, "mean_score_sq": null, "oracle_noise": 0.0}',
]
# The fields calculate_oracle_v.py (results/demo) and the exact one-token oracle (results/theory) add to a dataset
# row.
SETTINGS = {"model": "assets/tiny_policy", "n_oracle": 256}
SAVED_ORACLE_LINE = (
    '{"id": 0, "prompt": "24 / 8 =", "ground_truth": 3, "V_oracle": 0.73828125, "n_oracle": 256, "correct_count": '
    '189, "V_ci95_low": 0.6811957065092896, "V_ci95_high": 0.7883213619127559, "oracle_settings": {"model": '
    '"assets/tiny_policy", "n_oracle": 256}}'
)
SAVED_EXACT_LINE = (
    '{"id": 0, "prompt": "24 / 8 =", "ground_truth": 3, "V_oracle": 0.7112545919612724, "n_oracle": null, '
    '"correct_count": null, "V_ci95_low": 0.7112545919612724, "V_ci95_high": 0.7112545919612724, "V_method": '
    '"exact one-token enumeration", "oracle_settings": {"model": "assets/tiny_policy", "n_oracle": 256}}'
)

# c1 batch lines of run_tracecov progress logs (the tiny policy, --T 6 --M 3 --K_list 2 4 --c1_batch 3, before
# PR c1records): the oracle's Gram only, and with --advisor_estimator grpo_std's estimator_grams.
SAVED_C1_LINES = [
    (
        '{"c1_batch": 0, "K": 2, "n": 3, "prompt_indices": [0, 1, 2], "gram": [[0.5343061365624466, -0.044999'
        '20685710408, 0.0], [-0.04499920685710408, 19.001643184953718, 0.0], [0.0, 0.0, 0.0]], "within_each":'
        ' [0.1392406691492325, 2.832625386532134, 0.0], "between": 6.526982842791089, "within": 0.99062201856'
        '04555, "c1": 5.536360824230633}'
    ),
    (
        '{"c1_batch": 0, "K": 2, "n": 3, "prompt_indices": [0, 1, 2], "gram": [[0.5343061365624466, -0.044999'
        '20685710408, 0.0], [-0.04499920685710408, 19.001643184953718, 0.0], [0.0, 0.0, 0.0]], "within_each":'
        ' [0.1392406691492325, 2.832625386532134, 0.0], "between": 6.526982842791089, "within": 0.99062201856'
        '04555, "c1": 5.536360824230633, "estimator_grams": {"grpo_std": {"gram": [[0.0, 0.0, 0.0], [0.0, 0.0'
        ', 0.0], [0.0, 0.0, 0.0]], "within_each": [0.0, 0.0, 0.0]}, "grpo_std-bias": {"gram": [[13.3808824611'
        "72362, -0.8147738131186255, 0.0], [-0.8147738131186255, 248.74877345574214, 0.0], [0.0, 0.0, 0.0]], "
        '"within_each": [3.487070670867736, 37.081641423693384, 0.0]}}}'
    ),
]

numbers = st.floats(allow_nan=False, allow_infinity=False)
names = st.sampled_from(["naive", "grpo", "oracleV", "grpo_std", "drgrpo"])
per_estimator = st.dictionaries(names, numbers, min_size=1)
texts = st.text(max_size=20)
optional = st.none() | per_estimator


@st.composite
def prompt_records(draw) -> PromptRecord:
    """A record with every optional field either absent (None) or set; ||E s||^2 may be nan (not measured)."""
    return PromptRecord(
        K=draw(st.integers(2, 1024)),
        prompt_index=draw(st.integers(0, 10**6)),
        id=draw(st.integers(0, 10**6) | texts | st.none()),
        prompt=draw(texts | st.lists(st.fixed_dictionaries({"role": texts, "content": texts}), max_size=2)),
        gold=draw(st.integers() | texts),
        V_oracle=draw(st.floats(0.0, 1.0)),
        mean_reward=draw(st.floats(0.0, 1.0)),
        tr_cov=draw(per_estimator),
        bias2=draw(optional),
        mse=draw(optional),
        mean_score_sq=draw(st.none() | numbers | st.just(math.nan)),
        oracle_noise=draw(st.none() | numbers),
        bias2_own=draw(optional),
        mse_own=draw(optional),
    )


def same(a: PromptRecord, b: PromptRecord) -> bool:
    """Equal records, nan equal to nan."""
    return to_json(a.to_json()) == to_json(b.to_json())


@given(prompt_records())
def test_a_prompt_record_survives_a_json_line(record):
    """to_json -> the progress log's text -> from_json gives the record back, and the same line again."""
    line = to_json(record.to_json())
    back = PromptRecord.from_json(json.loads(line))
    assert same(back, record) and to_json(back.to_json()) == line
    if record.mean_score_sq is not None and math.isnan(record.mean_score_sq):  # saved null, read back as nan
        assert '"mean_score_sq": null' in line and math.isnan(back.mean_score_sq)
    absent = [name for name in ("bias2", "mse", "mean_score_sq", "oracle_noise") if getattr(record, name) is None]
    assert not set(absent) & set(json.loads(line))  # an absent optional field writes no key


@pytest.mark.parametrize("line", SAVED_PROMPT_LINES)
def test_saved_prompt_lines_are_read_and_written_byte_for_byte(line):
    """Lines of earlier runs: read, the same text written back, keys in the saved order."""
    record = PromptRecord.from_json(json.loads(line))
    assert to_json(record.to_json()) == line
    assert list(record.to_json()) == list(json.loads(line))


def test_the_saved_shapes_read_as_their_fields():
    """The fields of the saved lines, and mse_of: MSE where the record has it (biased runs), else tr Cov."""
    plain, own, biased = (PromptRecord.from_json(json.loads(line)) for line in SAVED_PROMPT_LINES)
    assert (plain.K, plain.prompt_index, plain.id, plain.gold) == (2, 12, 12, 684)
    assert plain.bias2 is None and plain.mse is None and plain.bias2_own is None and math.isnan(plain.mean_score_sq)
    assert plain.mse_of("grpo") == plain.tr_cov["grpo"] == 0.0
    assert own.mse_of("grpo_std") == -0.0029459590195603726 != own.tr_cov["grpo_std"]
    assert own.mse_own == {"grpo_std": -0.2607982143659752} and own.mean_score_sq == -22.56318808111419
    assert biased.bias2 == {"naive": 0.0} and biased.K == 8


def test_tidy_rows_follow_the_csv_columns():
    """One CSV row per estimator, in TIDY_COLUMNS; bias2 0 where the estimator has none, mse = tr Cov + bias2."""
    record = PromptRecord.from_json(json.loads(SAVED_PROMPT_LINES[1]))
    rows = record.tidy_rows(["oracleV", "grpo_std"])
    assert [list(row) for row in rows] == [TIDY_COLUMNS, TIDY_COLUMNS]
    assert rows[0] == {
        "prompt_index": 5,
        "id": 76,
        "K": 2,
        "estimator": "oracleV",
        "trace": 0.22949032336701816,
        "bias2": 0.0,
        "mse": 0.22949032336701816,
        "V_oracle": 0.011426497240587492,
        "mean_reward": 0.0,
        "mean_new_tokens": None,  # a record saved before the lengths were kept: empty cells
        "share_eos": None,
        "share_cut": None,
        "prompt_hash": prompt_hash(record.prompt),
    }
    assert rows[1]["bias2"] == rows[1]["mse"] == -0.0029459590195603726 and rows[1]["trace"] == 0.0


def test_prompt_hash_is_the_prompts_own():
    """The per-prompt CSV's prompt_hash (issue 54): the same text or messages give the same 16 hex digits, whatever
    the order of a message's keys; another text, another role or another message list gives others."""
    chat = [{"role": "user", "content": "Solve: 24 / 8 ="}]
    same = [{"content": "Solve: 24 / 8 =", "role": "user"}]
    others = ["Solve: 24 / 8 =", [{"role": "system", "content": "Solve: 24 / 8 ="}], [{"role": "user", "content": "x"}]]
    digest = prompt_hash(chat)
    assert len(digest) == 16 and int(digest, 16) >= 0 and prompt_hash(same) == digest
    assert len({digest, *map(prompt_hash, others)}) == 4


PROMPT_KEYS = ["K", "prompt_index", "id", "prompt", "gold", "V_oracle", "mean_reward", "tr_cov"]
C1_KEYS = ["c1_batch", "K", "n", "prompt_indices", "gram", "within_each", "between", "within", "c1"]


@pytest.mark.parametrize(
    ("cls", "line", "key"),
    [(PromptRecord, SAVED_PROMPT_LINES[0], key) for key in PROMPT_KEYS]
    + [(C1BatchRecord, SAVED_C1_LINES[0], key) for key in C1_KEYS],
)
def test_a_record_missing_a_required_key_is_refused(cls, line, key):
    """DataError naming the missing key and where the line came from (a progress log's line)."""
    data = json.loads(line)
    del data[key]
    with pytest.raises(DataError, match=f"^run.progress.rank0.jsonl: line 3: {cls.__name__} lacks {key}$"):
        cls.from_json(data, "run.progress.rank0.jsonl: line 3")


def test_a_prompt_record_with_an_unknown_key_is_refused():
    """An unknown key would be lost on the next write: refused, named (with a missing one when both)."""
    data = {**json.loads(SAVED_PROMPT_LINES[0]), "tr_cov2": {}}
    with pytest.raises(DataError, match="PromptRecord has unknown tr_cov2$"):
        PromptRecord.from_json(data)
    del data["gold"]
    with pytest.raises(DataError, match="PromptRecord lacks gold and has unknown tr_cov2$"):
        PromptRecord.from_json(data)
    with pytest.raises(DataError, match="must be a JSON object, not list"):
        PromptRecord.from_json([1, 2])


def test_holds_tells_prompt_records_from_the_other_progress_lines():
    """A progress log holds its config line, prompt records and c1 batch records."""
    assert PromptRecord.holds(json.loads(SAVED_PROMPT_LINES[0]))
    assert not PromptRecord.holds({"config": {}}) and not PromptRecord.holds({"c1_batch": 0, "K": 2})


def test_oracle_values_are_added_after_the_row_in_the_saved_order():
    """A Monte Carlo line as calculate_oracle_v.py wrote it (the exact line of exact_theory.py:
    tests/studies/test_one_token_oracle_line.py)."""
    row = {"id": 0, "prompt": "24 / 8 =", "ground_truth": 3}
    values = OracleValues(0.73828125, 256, 189, 0.6811957065092896, 0.7883213619127559, oracle_settings=SETTINGS)
    assert to_json(values.merged_into(row)) == SAVED_ORACLE_LINE
    again = OracleValues(0.25, 4, 1, 0.0, 0.5).merged_into(json.loads(SAVED_ORACLE_LINE))
    assert list(again) == list(json.loads(SAVED_ORACLE_LINE)) and again["V_oracle"] == 0.25  # keys keep places
    line = json.loads(SAVED_ORACLE_LINE)
    assert oracle_value(line) == 0.73828125 and oracle_count(line) == 256
    assert oracle_count(row) is None and oracle_count(json.loads(SAVED_EXACT_LINE)) is None


square = st.integers(1, 4).flatmap(
    lambda n: st.lists(st.lists(numbers, min_size=n, max_size=n), min_size=n, max_size=n)
)


@st.composite
def c1_batch_records(draw) -> C1BatchRecord:
    """A c1 batch with or without estimator_grams; any finite values (from_json checks keys, not the maths)."""
    gram = draw(square)
    n = len(gram)
    each = st.lists(numbers, min_size=n, max_size=n)
    grams = st.dictionaries(names, st.fixed_dictionaries({"gram": square, "within_each": each}), max_size=2)
    return C1BatchRecord(
        c1_batch=draw(st.integers(0, 1000)),
        K=draw(st.integers(2, 1024)),
        n=n,
        prompt_indices=draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)),
        gram=gram,
        within_each=draw(each),
        between=draw(numbers),
        within=draw(numbers),
        c1=draw(numbers),
        estimator_grams=draw(st.none() | grams),
    )


@given(c1_batch_records())
def test_a_c1_batch_record_survives_a_json_line(record):
    """to_json -> the progress log's text -> from_json gives the record back, and the same line again."""
    line = to_json(record.to_json())
    back = C1BatchRecord.from_json(json.loads(line))
    assert back == record and to_json(back.to_json()) == line
    assert C1BatchRecord.holds(json.loads(line)) and not PromptRecord.holds(json.loads(line))
    assert ("estimator_grams" in json.loads(line)) == (record.estimator_grams is not None)


@pytest.mark.parametrize("line", SAVED_C1_LINES)
def test_saved_c1_lines_are_read_and_written_byte_for_byte(line):
    """c1 lines of a real progress log: read, the same text written back, keys in the saved order."""
    record = C1BatchRecord.from_json(json.loads(line))
    assert to_json(record.to_json()) == line
    assert list(record.to_json()) == list(json.loads(line))
    assert (record.c1_batch, record.K, record.n, record.prompt_indices) == (0, 2, 3, [0, 1, 2])
    # between from the saved Gram matrix by the pairwise form sum_{i<j} ||g_i - g_j||^2 / (n (n - 1)), which equals
    # sum_i ||g_i - mean g||^2 / (n - 1); within the mean of within_each
    n, gram = record.n, record.gram
    pairs = sum(gram[i][i] + gram[j][j] - 2 * gram[i][j] for i in range(n) for j in range(i + 1, n))
    assert record.between == pytest.approx(pairs / (n * (n - 1)), rel=1e-12)
    assert record.within == pytest.approx(sum(record.within_each) / n, rel=1e-12)
    assert record.c1 == pytest.approx(pairs / (n * (n - 1)) - sum(record.within_each) / n, rel=1e-12)


def test_a_c1_batch_with_an_estimators_gram_and_zeroed():
    """with_estimator: the estimator's Gram and within_each in the oracle's place, the rest kept; zeroed:
    within_each = the Gram diagonal; the saved record itself unchanged."""
    record = C1BatchRecord.from_json(json.loads(SAVED_C1_LINES[1]))
    bias = record.with_estimator("grpo_std-bias")
    assert bias.gram[1] == [-0.8147738131186255, 248.74877345574214, 0.0]
    assert bias.within_each == [3.487070670867736, 37.081641423693384, 0.0]
    assert (bias.c1, bias.prompt_indices, bias.estimator_grams) == (record.c1, [0, 1, 2], record.estimator_grams)
    assert record.within_each == [0.1392406691492325, 2.832625386532134, 0.0]
    assert bias.zeroed().within_each == [13.380882461172362, 248.74877345574214, 0.0]
    assert record.zeroed().within_each == [0.5343061365624466, 19.001643184953718, 0.0]


def test_a_c1_batch_with_an_unknown_key_is_refused():
    """An unknown key would be lost on the next write: refused, named."""
    with pytest.raises(DataError, match="C1BatchRecord has unknown grams$"):
        C1BatchRecord.from_json({**json.loads(SAVED_C1_LINES[0]), "grams": {}})


def test_a_c1_batch_record_of_between_prompt_batch_results():
    """of_results: the oracle's result whole, the other estimators' gram and within_each as estimator_grams, keys
    in the order of the saved lines; no others, no estimator_grams."""
    import torch

    from grpo_mse.gradients.statistics import BetweenPromptBatch

    results = []
    for scale in (1.0, 2.0):
        batch = BetweenPromptBatch()
        for i, vector in enumerate(([3.0, 0.0], [0.0, 4.0], [1.0, 1.0])):
            batch.add([scale * torch.tensor(vector, dtype=torch.float64)], 3.0 * i, m=3, prompt_index=i)
        results.append(batch.result())
    record = C1BatchRecord.of_results(0, 2, results[0], {"grpo_std": results[1]})
    assert list(record.to_json()) == list(json.loads(SAVED_C1_LINES[1]))
    assert record.gram == [[9.0, 0.0, 3.0], [0.0, 16.0, 4.0], [3.0, 4.0, 2.0]] and record.within_each == [0, 1, 2]
    assert record.estimator_grams["grpo_std"]["gram"][1] == [0.0, 64.0, 16.0]
    # by hand: ||a - b||^2 = 25, ||a - c||^2 = 5, ||b - c||^2 = 10 for a, b, c = (3, 0), (0, 4), (1, 1), so
    # between = sum_i ||g_i - mean g||^2 / (n - 1) = (25 + 5 + 10) / 3 / 2; within = mean(0, 1, 2) = 1
    assert record.between == pytest.approx(20 / 3, rel=1e-12) and record.within == 1.0
    assert record.c1 == pytest.approx(17 / 3, rel=1e-12)
    assert list(C1BatchRecord.of_results(0, 2, results[0], {}).to_json()) == list(json.loads(SAVED_C1_LINES[0]))
