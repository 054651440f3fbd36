from fractions import Fraction

import pytest

from grpo_mse.errors import DataError
from grpo_mse.rewards.rules import (
    MAX_NUMBER_CHARS,
    RULES,
    RewardRule,
    check_answer_rule,
    check_answers,
    exact_number,
    gold_problem,
    integer_answer,
    last_integer,
    last_integer_reward,
    last_number,
    parse_gold,
    rule_for,
    score,
)


def test_last_integer_takes_the_last_match_including_sign():
    assert last_integer("3 + 4 = 7") == 7
    assert last_integer("the answer is -12") == -12
    assert last_integer("x-5") == -5  # the regex -?\d+ binds the minus sign
    assert last_integer("no digits here") is None
    assert last_integer("") is None


def test_reward_is_one_only_for_the_last_integer():
    assert last_integer_reward("42", 42) == 1.0
    assert last_integer_reward("41 then 42", 42) == 1.0
    assert last_integer_reward("42 then 41", 42) == 0.0
    assert last_integer_reward("-7", -7) == 1.0
    assert last_integer_reward("7", -7) == 0.0
    assert last_integer_reward("nothing", 0) == 0.0
    assert last_integer_reward("420", 42) == 0.0


def test_gold_given_as_string_or_float():
    assert last_integer_reward("answer: 15", "15") == 1.0
    assert last_integer_reward("answer: 15", " 15\n") == 1.0
    assert last_integer_reward("answer: -3", "-3") == 1.0
    assert last_integer_reward("15", 15.0) == 1.0
    assert parse_gold("1,234") == 1234
    assert parse_gold("abc") is None
    assert last_integer_reward("15", "abc") == 0.0


def test_answer_conventions_of_issue_25_case_7():
    """Unicode minus, thousands separators and integral decimals, as GSM8K's reference answers and math-verify
    read them (docs/training.md, "Answer conventions"); each case scored 0 or the wrong sign before."""
    from grpo_mse.rewards.gsm8k import gsm8k_reward
    from grpo_mse.rewards.rules import last_number, score

    assert last_integer("the answer is \u22127") == -7  # was 7: a correct "−7" scored 0, a wrong "7" scored 1
    assert last_integer_reward("\u22127", -7) == 1.0 and last_integer_reward("\u22127", 7) == 0.0
    assert last_integer_reward("x \u2013 3 = \uff0d5", "-5") == 1.0  # en dash and fullwidth minus
    assert last_integer_reward("so 1,234", 1234) == 1.0 and last_integer_reward("so 1,234", 234) == 0.0
    assert last_integer_reward("42.0", 42) == 1.0 and last_integer_reward("42.5", 42) == 0.0
    assert last_integer_reward("The answer is 42.", 42) == 1.0  # a full stop is not a decimal point
    assert last_integer("1,2345") == 2345 and last_integer("1, 234") == 234  # not thousands groups
    assert last_integer("3.5") is None and last_number("3.5") * 2 == 7
    assert last_integer("7" * 5000) is None  # longer than MAX_NUMBER_CHARS: no number, no quadratic parse
    assert gsm8k_reward("#### \u22125", "-5") == 1.0 and gsm8k_reward("#### \u22125", "5") == 0.0  # was 0 and 0
    assert gsm8k_reward("#### -5", "#### \u22125") == 1.0  # a gold answer written with a Unicode minus
    assert score("openai/gsm8k", "#### 1,234.00", "1234") == 1.0
    assert parse_gold("\u221212") == -12


def test_exact_number_reads_thousands_commas_a_dollar_and_full_stops():
    """The exact numbers the GSM8K rule compares and ``rule_for`` reads a gold by (found by mutation testing,
    results/mutation): commas, a leading $ and trailing full stops dropped; a leading point is a decimal point."""
    assert exact_number("1,234") == 1234 and exact_number(" $18.00. ") == 18 and exact_number("18.00..") == 18
    assert exact_number(".5") == Fraction(1, 2) and exact_number("\u22123/4") == Fraction(-3, 4)
    assert exact_number("abc") is None and exact_number("1/0") is None and exact_number("X1") is None
    assert exact_number("1X") is None and exact_number("5$") is None
    digits = "9" * MAX_NUMBER_CHARS  # the longest number read; one digit more is none
    assert exact_number(digits) == int(digits) and exact_number(digits + "9") is None
    assert last_number(f"so {digits}") == int(digits) and last_number(f"so {digits}9") is None
    assert parse_gold(digits) == int(digits) and parse_gold(digits + "9") is None
    assert parse_gold(2.5) is None and parse_gold(2.0) == 2
    assert rule_for("custom", "1,234") == "arithmetic" and rule_for("custom", "\\frac{1}{2}") == "math"


def test_final_answer_rule_accepts_a_custom_source_with_an_integer_gold():
    """--answer_rule final_answer judges rows whose gold is an integer whatever their data_source; only another
    rule's rows are refused (tests/rewards/test_final_answer_rule.py)."""
    check_answer_rule([{"data_source": "my_set", "ground_truth": "1,234"}, {"ground_truth": 7}], "final_answer", "t")


def test_gold_problem_says_why_the_arithmetic_rule_reads_no_whole_number():
    """None when the rule reads a whole number (or for a non-text gold); otherwise the reason a refusal names."""
    assert gold_problem("1,234") is None and gold_problem("\u22127") is None and gold_problem(3.5) is None
    assert gold_problem("2.5").startswith("not a whole number")
    assert gold_problem("1e3").startswith("not a well-formed number") and gold_problem("12,34").startswith("not a well")


def test_a_source_no_rule_claims_is_scored_by_the_rule_its_ground_truth_picks():
    """score hands the ground truth to the rule choice: a number picks the last-number rule (no \\boxed{} needed),
    anything else the boxed MATH rule."""
    assert score("custom", "The answer is 42", 42) == 1.0 == score("custom", "The answer is 42", "42")
    assert score("custom", "The answer is 42", "x^2") == 0.0  # the MATH rule: no boxed answer


def test_a_rule_that_raises_scores_zero(monkeypatch):
    """Anything a rule cannot judge scores 0.0 (the module's contract), a rule that raises included."""

    def unreadable(solution, gold):
        raise ValueError(f"cannot read {solution!r}")

    monkeypatch.setitem(RULES, "raising", RewardRule("raising", unreadable, str, claims=lambda s: s == "raising"))
    assert score("raising", "42", 42) == 0.0


def test_a_missing_data_source_or_solution_is_the_empty_text(monkeypatch):
    """None reads as "": a row without a data source is claimed by no rule that needs a name (a rule registered
    here claims every named source), and a missing solution is judged as the empty answer (this exact-match rule
    scores it 1 against an empty gold, 0 against the text "None")."""

    def exact(solution, gold):
        return float(solution.strip() == str(gold).strip())

    monkeypatch.setitem(RULES, "named", RewardRule("named", exact, str, claims=bool))
    assert rule_for("my_source", "7") == "named"
    assert rule_for(None, "7") == rule_for("", "7") == "arithmetic"
    assert score("my_source", None, "") == 1.0
    assert score("my_source", None, "None") == 0.0


def test_integer_answer_is_the_gold_as_the_arithmetic_rule_reads_it():
    """The arithmetic rule's written answer: the integer parse_gold reads, or the gold itself when it reads none
    (check_answers then scores that text and refuses the row)."""
    assert integer_answer("1,234") == "1234" and integer_answer(7.0) == "7" and integer_answer("\u22127") == "-7"
    assert integer_answer("2.5") == "2.5" and integer_answer("seven") == "seven"


def test_check_answers_picks_an_unclaimed_sources_rule_by_its_ground_truth_and_names_the_problem():
    """A source no rule claims, with a number for ground truth, is the arithmetic rule's: "1,234" is accepted (its
    written answer 1234 scores 1), "2.5" refused naming that rule and gold_problem's reason; a named arithmetic row
    with an unreadable gold is refused with the reason too."""
    check_answers([{"data_source": "my_set", "ground_truth": "1,234"}], "t.jsonl")
    with pytest.raises(DataError) as refused:
        check_answers([{"ground_truth": "1,234"}, {"data_source": "arithmetic", "ground_truth": "2.5"}], "t.jsonl")
    assert "row 1 " in str(refused.value) and gold_problem("2.5") in str(refused.value)
    with pytest.raises(
        DataError, match=r"not a whole number .*which the arithmetic reward rule \(data_source 'my_set'"
    ):
        check_answers([{"data_source": "my_set", "ground_truth": "2.5"}], "t.jsonl")  # a number: arithmetic's row


def test_final_answer_rule_refuses_a_source_another_rule_claims_even_with_an_integer_gold():
    """The rule is chosen by the row's data_source first: a GSM8K row is the gsm8k rule's, whatever its gold."""
    assert rule_for("openai/gsm8k", "3") == "gsm8k"
    with pytest.raises(DataError, match="row 0 has data_source 'openai/gsm8k'"):
        check_answer_rule([{"data_source": "openai/gsm8k", "ground_truth": "3"}], "final_answer", "t")
