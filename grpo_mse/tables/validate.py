"""Checks on table rows that would otherwise give silently wrong numbers (run before any model work)."""

from __future__ import annotations

import math
import re

from grpo_mse.tables.inputs import DataError

INTEGER_TEXT = re.compile(r"^\s*-?\d+\s*$")


def _empty_prompt(prompt) -> bool:
    if isinstance(prompt, str):
        return not prompt.strip()
    if isinstance(prompt, dict):
        prompt = [prompt]
    if isinstance(prompt, list):
        return not any(isinstance(m, dict) and str(m.get("content") or "").strip() for m in prompt)
    return False  # other types are refused when the prompt is formatted


def check_prompts(rows: list[dict], source: str) -> None:
    """DataError for a row whose prompt is empty (an empty string or messages without content)."""
    for index, row in enumerate(rows):
        if _empty_prompt(row["prompt"]):
            raise DataError(f"{source}: row {index} has an empty prompt")


def is_integer_answer(gold) -> bool:
    """True for an int, an integral float or a string of digits: what the last-integer rule can match."""
    if isinstance(gold, bool):
        return False
    if isinstance(gold, int):
        return True
    if isinstance(gold, float):
        return math.isfinite(gold) and gold.is_integer()
    return isinstance(gold, str) and bool(INTEGER_TEXT.match(gold))


def check_integer_answers(rows: list[dict], source: str) -> None:
    """DataError for a ground truth the last-integer reward rule can never match (it would score 0 always)."""
    for index, row in enumerate(rows):
        gold = row["ground_truth"]
        if not is_integer_answer(gold):
            raise DataError(f"{source}: row {index} has ground_truth {gold!r}, not an integer; the last-integer "
                            f"reward rule would score every sample 0")


def check_oracle_values(rows: list[dict], source: str) -> None:
    """DataError unless every V_oracle is a finite number in [0, 1]."""
    for index, row in enumerate(rows):
        value = row["V_oracle"]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not (ok and 0 <= value <= 1):
            raise DataError(f"{source}: row {index} has V_oracle {value!r}; it must be a probability in [0, 1]")


def check_prompt_lengths(lengths: list[int], max_new_tokens: int, positions: int | None, source: str) -> None:
    """DataError when a prompt plus max_new_tokens exceeds the model's positions (``positions`` None: unknown)."""
    if not positions:
        return
    for index, length in enumerate(lengths):
        if length + max_new_tokens > positions:
            raise DataError(f"{source}: row {index} has {length} prompt tokens + --max_new_tokens {max_new_tokens} "
                            f"> the model's {positions} positions")


def model_positions(model) -> int | None:
    """The model's maximum sequence length from its config, or None when it does not say."""
    config = getattr(model, "config", None)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
