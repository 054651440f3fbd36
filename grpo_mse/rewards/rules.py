"""Answer-checking rules of training and gradient evaluation, and their registry.

Each rule is one ``RewardRule`` object (its parsing and comparison, and its check of a row's ground truth), named in
the registry ``RULES``: the arithmetic rule (last number) and the stricter final-answer rule live here; GSM8K's
("####", ``rewards/gsm8k.py``) and MATH's (boxed, math-verify, ``rewards/boxed_math.py``) are modules of their own,
registered as any new rule is and imported at the first row they may judge. ``score(data_source, solution,
ground_truth)`` picks the rule from the data source and returns 1.0 or 0.0; anything that cannot be parsed scores 0.0.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from grpo_mse.errors import DataError

# Number conventions of the arithmetic and GSM8K rules (docs/training.md, "Answer conventions"), those of GSM8K's
# reference answers and of math-verify: a Unicode minus or dash before a digit is a minus sign, a comma between
# groups of three digits is a thousands separator ("1,234" = 1234), and numbers compare by value ("42.0" = 42).
MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})
NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")
MAX_NUMBER_CHARS = 4000  # longer numbers score 0 (exact comparison of huge literals is pointless)


def ascii_minus(text: str) -> str:
    """``text`` with the Unicode minus and dash signs (U+2212, U+2012, U+2013, U+FE63, U+FF0D) as ``-``."""
    return str(text or "").translate(MINUS_SIGNS)


def last_number(text: str) -> Fraction | None:
    """The last number of ``text`` (optional minus, thousands commas, decimals) as an exact Fraction, or None."""
    matches = NUMBER.findall(ascii_minus(text))
    if not matches or len(matches[-1]) > MAX_NUMBER_CHARS:
        return None
    return Fraction(matches[-1].replace(",", ""))


def last_integer(text: str) -> int | None:
    """The last number of ``text`` when it is a whole number ("42.0" -> 42, "1,234" -> 1234, "−7" -> -7), else
    None."""
    number = last_number(text)
    return int(number) if number is not None and number.denominator == 1 else None


def parse_gold(gold) -> int | None:
    """Gold answer as int: an int, an integral float, or a text that is one whole number written as the answer side
    reads numbers (``NUMBER`` after the minus signs, spaces around it: " 42 ", "1,234", "−7", "42.0"), so that the
    answer written exactly as the gold scores 1. None otherwise: "1,2345" (an answer reads 1 and 2345), "1e1" (an
    answer reads 1 and 1), "+5", "1_000", "2.5"."""
    if isinstance(gold, bool):
        return None
    if isinstance(gold, int):
        return gold
    if isinstance(gold, float):
        return int(gold) if gold.is_integer() else None
    text = ascii_minus(str(gold)).strip()
    if len(text) > MAX_NUMBER_CHARS or not NUMBER.fullmatch(text):
        return None
    value = Fraction(text.replace(",", ""))
    return int(value) if value.denominator == 1 else None


def gold_problem(gold) -> str | None:
    """Why the arithmetic rule reads no whole number in a text ``gold`` (None when it does, or for other types)."""
    if not isinstance(gold, str) or parse_gold(gold) is not None:
        return None
    if NUMBER.fullmatch(ascii_minus(gold).strip()):
        return "not a whole number (the arithmetic rule compares whole numbers)"
    return (
        "not a well-formed number (answers are read as an optional minus, digits with commas only between groups "
        "of three as in 1,234, an optional decimal part; no exponent, '+' or '_')"
    )


def last_integer_reward(text: str, gold) -> float:
    """1.0 if the last number of ``text`` equals the integer ``gold`` by value, else 0.0 (G in {0, 1})."""
    predicted, target = last_number(text), parse_gold(gold)
    return float(predicted is not None and target is not None and predicted == target)


# The stricter answer rule (docs/real_llm.md, "Reward audit"): the number must stand where a final answer
# stands, as the prompts ask ("Return ONLY the final integer"): the response ends with it, and it is the whole
# response or follows "=", ":" or "is" ("Answer: 17", "The answer is 17.", "24 / 8 = 3"); markdown bold, $...$,
# brackets and a final period around it are allowed. A pretrained chat model's free-form text at temperature 1
# often mentions the gold number in passing or is cut off mid-sentence after one ("... 100 / 10 = "), which the
# last-number rule rewards.
FINAL_ANSWER = re.compile(
    r"(?:^|[=:]|\bis)\s*[*_$(\[]*\s*(" + NUMBER.pattern + r")\s*[*_$)\]]*\s*\.?\s*$", re.IGNORECASE
)


def final_answer(text: str) -> Fraction | None:
    """The number ``text`` ends with in a final-answer position (see FINAL_ANSWER), as an exact Fraction, or None."""
    match = FINAL_ANSWER.search(ascii_minus(text).strip())
    if match is None or len(match.group(1)) > MAX_NUMBER_CHARS:
        return None
    return Fraction(match.group(1).replace(",", ""))


def final_answer_reward(text: str, gold) -> float:
    """1.0 if ``text`` ends with a final answer (FINAL_ANSWER) equal to the integer ``gold`` by value, else 0.0."""
    predicted, target = final_answer(text), parse_gold(gold)
    return float(predicted is not None and target is not None and predicted == target)


def exact_number(text: str) -> Fraction | None:
    """``text`` as an exact number (commas, a leading ``$`` and a trailing ``.`` allowed), or None."""
    cleaned = ascii_minus(text).strip().replace(",", "").lstrip("$").rstrip(".").strip()
    if len(cleaned) > MAX_NUMBER_CHARS:
        return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


@dataclass(frozen=True)
class RewardRule:
    """A 0/1 reward rule as one object: ``reward(solution, ground_truth)`` reads the solution's answer and compares
    it with the row's (1.0 or 0.0); ``answer(ground_truth)`` writes the ground truth as a solution the rule should
    score 1, so a row whose own answer scores 0 is refused before any sampling (``check_answers``: every sample
    would score 0), with ``gold_problem(ground_truth)``'s reason when it gives one; ``claims(data_source)`` (lower
    case) says which rows it judges."""

    name: str
    reward: Callable[[str, object], float]
    answer: Callable[[object], str]
    claims: Callable[[str], bool] = lambda data_source: False
    gold_problem: Callable[[object], str | None] = lambda ground_truth: None


def integer_answer(gold) -> str:
    """The gold written as the integer rules read it ("1,234" -> "1234"), or as given when they read none."""
    value = parse_gold(gold)
    return str(gold) if value is None else str(value)


ARITHMETIC_RULE = RewardRule(
    "arithmetic",
    last_integer_reward,
    integer_answer,
    claims=lambda source: source.startswith("arithmetic"),
    gold_problem=gold_problem,
)
# --answer_rule final_answer's rule: in place of the rows' rules, on rows of the arithmetic rule (check_answer_rule)
FINAL_ANSWER_RULE = RewardRule("final_answer", final_answer_reward, integer_answer, gold_problem=gold_problem)

# The rules of the rows, by name, in the order they claim a data source; a data source none claims takes the
# arithmetic rule when its ground truth is a number, else the math rule. A new rule is one module holding its
# RewardRule plus one entry here, "module:attribute" (imported at the first lookup); it judges the data sources no
# rule before it claims, so the rows of the rules above are scored as before.
RULES: dict[str, RewardRule | str] = {
    "arithmetic": ARITHMETIC_RULE,
    "gsm8k": "grpo_mse.rewards.gsm8k:RULE",
    "math": "grpo_mse.rewards.boxed_math:RULE",
}


def reward_rule(name: str) -> RewardRule:
    """The rule registered under ``name`` in RULES (its module imported when the entry names one)."""
    rule = RULES[name]
    if isinstance(rule, str):
        module, _, attribute = rule.partition(":")
        rule = getattr(importlib.import_module(module), attribute)
    return rule


def rule_for(data_source: str, ground_truth=None) -> str:
    """Rule name for a data source: the first rule of RULES that claims it (``arithmetic``, ``gsm8k``, ``math``),
    else ``arithmetic`` or ``math`` by the ground truth."""
    source = str(data_source or "").lower()
    for name in RULES:
        if reward_rule(name).claims(source):
            return name
    return "arithmetic" if exact_number(str(ground_truth)) is not None else "math"


def score(data_source: str, solution: str, ground_truth) -> float:
    """0/1 reward of ``solution`` against ``ground_truth`` under the rule of ``data_source``."""
    try:
        return float(reward_rule(rule_for(data_source, ground_truth)).reward(solution or "", ground_truth))
    except Exception:
        return 0.0


DEFAULT_SOURCE = "arithmetic"  # rows without a data_source (the built-in data, the original's tables): last integer


# --answer_rule: "row" (each row's data_source rule; the original last-integer rule without one) or
# "final_answer" (the stricter rule above, for integer answers).
ANSWER_RULES = ("row", "final_answer")


def row_reward(row: dict, solution: str, answer_rule: str = "row") -> float:
    """0/1 reward of ``solution`` for a table row: ``score`` under its ``data_source`` (else DEFAULT_SOURCE), or
    the final-answer rule when ``answer_rule`` is ``final_answer``."""
    if answer_rule == "final_answer":
        return FINAL_ANSWER_RULE.reward(solution or "", row["ground_truth"])
    return score(row.get("data_source") or DEFAULT_SOURCE, solution, row["ground_truth"])


def check_answers(rows: list[dict], source: str) -> None:
    """DataError for a ground truth that the row's reward rule (from its data_source, by default the
    last-integer rule) can never match: its own written answer (``RewardRule.answer``) scores 0, and so would
    every sample."""
    for index, row in enumerate(rows):
        data_source, gold = row.get("data_source") or DEFAULT_SOURCE, row["ground_truth"]
        name = rule_for(data_source, gold)
        rule = reward_rule(name)
        if row_reward(row, rule.answer(gold)) != 1.0:
            why = rule.gold_problem(gold)  # a rule that can say what is wrong (the arithmetic rule) does
            raise DataError(
                f"{source}: row {index} has ground_truth {gold!r}, {why + ', ' if why else ''}which the {name} reward "
                f"rule (data_source {data_source!r}) can never match; every sample would score 0"
            )


def check_answer_rule(rows: list[dict], answer_rule: str, source: str) -> None:
    """DataError naming the first row the final-answer rule cannot judge (a data_source with another rule)."""
    if answer_rule != "final_answer":
        return
    for i, row in enumerate(rows):
        rule = rule_for(row.get("data_source") or DEFAULT_SOURCE, row.get("ground_truth"))
        if rule != "arithmetic":
            raise DataError(
                f"{source}: row {i} has data_source {row.get('data_source')!r} ({rule} rule); --answer_rule "
                "final_answer judges integer answers only: use --answer_rule row"
            )
