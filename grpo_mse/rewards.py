"""Verifiable 0/1 rewards: last integer in the text equals the gold answer."""

from __future__ import annotations

import re

INTEGER = re.compile(r"-?\d+")


def last_integer(text: str) -> int | None:
    """The last match of ``-?\\d+`` in ``text`` as an int, or None when there is none."""
    matches = INTEGER.findall(text or "")
    return int(matches[-1]) if matches else None


def parse_gold(gold) -> int | None:
    """Gold answer as int (accepts int, integral float, or a string such as " 42 " or "1,234")."""
    if isinstance(gold, bool):
        return None
    if isinstance(gold, int):
        return gold
    if isinstance(gold, float):
        return int(gold) if gold.is_integer() else None
    text = str(gold).strip().replace(",", "")
    try:
        return int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            return None
        return int(value) if value.is_integer() else None


def last_integer_reward(text: str, gold) -> float:
    """1.0 if the last integer of ``text`` equals ``gold``, else 0.0 (G in {0, 1})."""
    predicted, target = last_integer(text), parse_gold(gold)
    return float(predicted is not None and target is not None and predicted == target)
