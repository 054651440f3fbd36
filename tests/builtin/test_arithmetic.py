from collections import Counter

import pytest

from grpo_mse.builtin import arithmetic


def test_answers_are_exact_integers_of_the_problem():
    rows = arithmetic.make_rows(300, seed=1)
    for row in rows:
        problem = row["prompt"][0]["content"].splitlines()[-1]
        assert problem.endswith(" =")
        expression = problem[:-2].replace("/", "//")
        assert eval(expression) == row["ground_truth"]
        if "/" in problem:
            numerator, denominator = (int(x) for x in problem[:-2].split(" / "))
            assert numerator % denominator == 0


def test_schema_templates_and_determinism():
    zero = arithmetic.make_rows(20, seed=3, style="zero_shot")
    few = arithmetic.make_rows(20, seed=3, style="few_shot")
    assert zero == arithmetic.make_rows(20, seed=3, style="zero_shot")
    for z, f in zip(zero, few):
        assert set(z) == {"id", "prompt", "ground_truth"}
        assert z["ground_truth"] == f["ground_truth"] and isinstance(z["ground_truth"], int)
        assert z["prompt"][0]["role"] == "user"
        assert z["prompt"][0]["content"].startswith(arithmetic.ZERO_SHOT_INSTRUCTION + "\n")
        text = f["prompt"][0]["content"]
        assert text.startswith("You are a calculator") and "Now solve:\nProblem: " in text
        assert text.count("Answer: ") == 5 and "Problem: 15 + 25 =\nAnswer: 40" in text
    assert [r["id"] for r in zero] == list(range(20))


def test_few_shot_examples_are_correct():
    for problem, answer in arithmetic.FEW_SHOT_EXAMPLES:
        assert eval(problem[:-2].replace("/", "//")) == answer


def _kind(problem: str) -> str:
    if "*" in problem:
        return "multiplication"
    if "/" in problem:
        return "division"
    if "(" in problem:
        return "parentheses"
    operators = sum(problem.count(f" {op} ") for op in "+-")
    return {2: "two_step", 3: "three_step"}[operators]


def test_kinds_are_drawn_uniformly():
    rows = arithmetic.make_rows(2500, seed=0)
    counts = Counter(_kind(r["prompt"][0]["content"].splitlines()[-1]) for r in rows)
    assert set(counts) == set(arithmetic.KINDS)
    assert all(400 < counts[k] < 600 for k in arithmetic.KINDS), counts
    with pytest.raises(ValueError, match="unknown problem kind"):
        arithmetic.make_problem("cube", __import__("random").Random(0))
