"""Gold and answer are read by one rule (issue 36, case 7): a gold accepted by the arithmetic rule is a whole number
as the answer side reads numbers, so the answer written exactly as the gold scores 1; a gold that is not
(``"1,2345"``, read as 12345 while the answer ``1,2345`` is two numbers; ``"1e1"``, read as 10) is no gold."""

from __future__ import annotations

from conftest import bounded
from gold_strategies import WHOLE, golds
from hypothesis import given

from grpo_mse.rewards.rules import last_integer_reward, parse_gold, score


@bounded(300)
@given(golds())
def test_a_gold_is_read_as_the_answer_side_reads_it(case):
    text, verdict, value = case
    assert parse_gold(text) == value, (text, verdict)
    echoed = last_integer_reward(text, text)  # the answer written exactly as the gold
    assert echoed == (1.0 if verdict == WHOLE else 0.0), (text, verdict)
    assert score("arithmetic_zero_shot", f"so the answer is {text}", text) == echoed


def test_the_issues_golds():
    assert parse_gold("1,2345") is None and parse_gold("1e1") is None  # were 12345 and 10
    assert parse_gold("1,234") == 1234 and parse_gold(" \u221242.0 ") == -42 and parse_gold(10.0) == 10
