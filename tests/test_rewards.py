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
