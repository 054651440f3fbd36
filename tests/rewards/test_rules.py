from grpo_mse.rewards.rules import last_integer, last_integer_reward, parse_gold


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
