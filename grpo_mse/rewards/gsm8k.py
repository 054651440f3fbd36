"""The GSM8K reward rule: the number after the last ``####``, compared with the row's by exact value.

Registered in ``grpo_mse.rewards.rules.RULES`` as ``"gsm8k"`` and imported at the first row it may judge, like any
rule (docs/architecture.md, "A new reward rule").
"""

from __future__ import annotations

import re

from grpo_mse.rewards.rules import RewardRule, ascii_minus, exact_number

GSM8K_ANSWER = re.compile(r"####\s*\$?\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


def extract_gsm8k(text: str) -> str | None:
    """The number after the last ``####`` in ``text`` (commas removed), or None."""
    matches = GSM8K_ANSWER.findall(ascii_minus(text))
    return matches[-1].replace(",", "") if matches else None


def gsm8k_reward(solution: str, gold) -> float:
    """1.0 if the number after the last ``####`` equals ``gold`` (numerically), else 0.0."""
    predicted = extract_gsm8k(solution)
    gold_text = extract_gsm8k(str(gold)) or str(gold)
    if predicted is None:
        return 0.0
    a, b = exact_number(predicted), exact_number(gold_text)
    return float(a is not None and b is not None and a == b)


RULE = RewardRule(
    "gsm8k",
    gsm8k_reward,
    lambda gold: f"#### {extract_gsm8k(str(gold)) or str(gold).strip()}",
    claims=lambda source: "gsm8k" in source,
)
