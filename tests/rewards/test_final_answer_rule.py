"""--answer_rule final_answer: the number must end the response in a final-answer position (alone, or after =, :
or "is"), with the last-integer rule's conventions for the number; it only ever removes rewards, and an old
table or run without the setting reads as the original rule."""

import pytest
from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.errors import DataError
from grpo_mse.rewards.rules import (
    MAX_NUMBER_CHARS,
    check_answer_rule,
    final_answer_reward,
    last_integer_reward,
    row_reward,
)
from grpo_mse.tables.inputs import settings_mismatch
from grpo_mse.tables.resume import differences

FINAL_FORMS = ["{n}", "Answer: {n}", "The answer is {n}.", "24 / 8 = {n}", "**{n}**", "The final answer is $${n}$$"]
PASSING_MENTIONS = ["{n} is the first number here", "The value of {n}...", "Roman numeral value of {n} is X and so"]


def written(n: int) -> str:
    """``n`` as the last-integer rule reads it: thousands commas above 9999 half the time."""
    return f"{n:,}" if abs(n) > 9999 and n % 2 else str(n)


@bounded(200)
@given(n=st.integers(-(10**6), 10**6), form=st.sampled_from(FINAL_FORMS), pad=st.sampled_from(["", " ", "\n", " \n "]))
def test_a_final_answer_scores_its_value_only(n, form, pad):
    text = pad + form.format(n=written(n)) + pad
    assert final_answer_reward(text, n) == 1.0 == last_integer_reward(text, n)
    assert final_answer_reward(text, n + 1) == 0.0


@bounded(100)
@given(n=st.integers(0, 10**4), form=st.sampled_from(PASSING_MENTIONS))
def test_a_number_mentioned_in_passing_or_cut_off_scores_zero(n, form):
    text = form.format(n=n)
    assert last_integer_reward(text, n) == 1.0  # the original rule's false positive
    assert final_answer_reward(text, n) == 0.0
    assert final_answer_reward(f"The answer is {n} + 1 = ", n) == 0.0  # cut off at the token limit


@bounded(300)
@given(
    text=st.text(alphabet=st.sampled_from(list("0123456789 -=:.,*$isAnwer\n")), max_size=30), gold=st.integers(-99, 99)
)
def test_the_final_answer_rule_never_rewards_what_the_last_integer_rule_does_not(text, gold):
    assert final_answer_reward(text, gold) <= last_integer_reward(text, gold)


def test_row_reward_takes_the_rule():
    row = {"prompt": "p", "ground_truth": 10}
    assert row_reward(row, "100 / 10 = ") == 1.0 and row_reward(row, "100 / 10 = ", "final_answer") == 0.0
    assert row_reward(row, "100 / 10 = 10", "final_answer") == 1.0


def test_rows_with_another_rule_are_refused_under_final_answer():
    rows = [{"ground_truth": 3}, {"ground_truth": "\\frac{1}{2}", "data_source": "math"}]
    check_answer_rule(rows, "row", "t.jsonl")
    with pytest.raises(DataError, match=r"t.jsonl: row 1 has data_source 'math' \(math rule\)"):
        check_answer_rule(rows, "final_answer", "t.jsonl")


def test_settings_saved_before_the_flag_read_as_the_original_rule():
    old = {"model": "m", "temperature": 1.0}
    assert differences(old, {"model": "m", "temperature": 1.0, "answer_rule": "row"}, ["answer_rule"]) == []
    assert differences(old, {"answer_rule": "final_answer"}, ["answer_rule"]) == [
        "answer_rule (saved 'row', now 'final_answer')"
    ]
    table = [{"oracle_settings": {"model": "m", "temperature": 1.0, "top_p": 0.95, "max_new_tokens": 32}}]
    run = {"model": "m", "temperature": 1.0, "top_p": 0.95, "max_new_tokens": 32}
    assert settings_mismatch(table, {**run, "answer_rule": "row"}) is None
    assert "answer_rule='row' (run: 'final_answer')" in settings_mismatch(table, {**run, "answer_rule": "final_answer"})


def test_a_final_answer_as_long_as_the_longest_number_is_read():
    """MAX_NUMBER_CHARS digits are a number; one more is none (as for the last-integer rule)."""
    digits = "7" * MAX_NUMBER_CHARS
    assert final_answer_reward(f"Answer: {digits}", digits) == 1.0
    assert final_answer_reward(f"Answer: {digits}7", digits + "7") == 0.0
