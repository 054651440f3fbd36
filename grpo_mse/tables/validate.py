"""Checks on table rows that would otherwise give silently wrong numbers (run before any model work)."""

from __future__ import annotations

import math
import numbers

from grpo_mse.tables.inputs import DataError
from grpo_mse.tables.records import V_ORACLE, oracle_count


def _empty_prompt(prompt) -> bool:
    if isinstance(prompt, str):
        return not prompt.strip()
    if isinstance(prompt, dict):
        prompt = [prompt]
    if isinstance(prompt, list):
        return not any(isinstance(m, dict) and str(m.get("content") or "").strip() for m in prompt)
    return False  # other types are refused when the prompt is formatted


def prompt_problem(prompt) -> str | None:
    """Why ``prompt`` cannot be formatted (None when it can): a string, or a list of {"role", "content"}
    messages (one such dict is taken as a list of one) whose role and content are strings."""
    if isinstance(prompt, str):
        return None
    messages = [prompt] if isinstance(prompt, dict) else prompt
    if not isinstance(messages, list):
        return (
            f"the prompt is {type(prompt).__name__} {prompt!r:.40}; it must be a string or a list of "
            "{'role', 'content'} messages"
        )
    for number, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"message {number} of the prompt is not a {{'role', 'content'}} object"
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                what = "no" if key not in message else f"a non-string ({type(message[key]).__name__})"
                return f"message {number} of the prompt has {what} {key!r} field; each message needs role and content"
    return None


def check_prompts(rows: list[dict], source: str) -> None:
    """DataError for a row whose prompt cannot be formatted or is empty (an empty string or no content)."""
    for index, row in enumerate(rows):
        problem = prompt_problem(row["prompt"])
        if problem:
            raise DataError(f"{source}: row {index}: {problem}")
        if _empty_prompt(row["prompt"]):
            raise DataError(f"{source}: row {index} has an empty prompt")


def correct_solution(rule: str, gold) -> str:
    """A solution the reward ``rule`` should score 1 against ``gold`` (the answer written as the rule expects)."""
    from grpo_mse.rewards.rules import extract_gsm8k, last_boxed, parse_gold

    if rule == "arithmetic":
        value = parse_gold(gold)
        return str(gold) if value is None else str(value)
    if rule == "gsm8k":
        return f"#### {extract_gsm8k(str(gold)) or str(gold).strip()}"
    return f"\\boxed{{{last_boxed(str(gold)) or str(gold).strip()}}}"


def check_answers(rows: list[dict], source: str) -> None:
    """DataError for a ground truth that the row's reward rule (from its data_source, by default the
    last-integer rule) can never match: every sample would score 0."""
    from grpo_mse.rewards.rules import DEFAULT_SOURCE, gold_problem, row_reward, rule_for

    for index, row in enumerate(rows):
        data_source, gold = row.get("data_source") or DEFAULT_SOURCE, row["ground_truth"]
        rule = rule_for(data_source, gold)
        if row_reward(row, correct_solution(rule, gold)) != 1.0:
            why = gold_problem(gold) if rule == "arithmetic" else None  # the arithmetic rule can say what is wrong
            raise DataError(
                f"{source}: row {index} has ground_truth {gold!r}, {why + ', ' if why else ''}which the {rule} reward "
                f"rule (data_source {data_source!r}) can never match; every sample would score 0"
            )


def check_oracle_values(rows: list[dict], source: str) -> None:
    """DataError unless every V_oracle is a finite number in [0, 1]; one that is not a number at all (a quoted
    "0.5", a bool, a list) is named by its type, the problem to fix."""
    for index, row in enumerate(rows):
        value = row[V_ORACLE]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            kind = "text" if isinstance(value, str) else f"a {type(value).__name__}"
            raise DataError(
                f"{source}: row {index} has V_oracle {value!r:.40}, which is {kind}, not a number; V_oracle must be "
                "a number in [0, 1] (written without quotes)"
            )
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise DataError(f"{source}: row {index} has V_oracle {value!r}; it must be a probability in [0, 1]")


CORRECT_COUNT = "correct_count"  # the table column of the rewards of 1 among the n_oracle samples behind V_oracle
COUNT_TOLERANCE = 1e-9  # V_oracle = correct_count / n_oracle up to float rounding (and a copy to 12 digits)


def check_oracle_agreement(rows: list[dict], source: str) -> None:
    """DataError for a row that carries n_oracle and correct_count (as calculate_oracle_v.py writes them) whose
    correct_count is not a whole number in [0, n_oracle], or whose V_oracle is not correct_count / n_oracle: one of
    them was edited, and which one is right cannot be told (V_oracle is the baseline, n_oracle the noise correction's
    count), so the run is refused rather than warned about. Run after check_oracle_values."""
    for index, row in enumerate(rows):
        total, count = oracle_count(row), row.get(CORRECT_COUNT)
        if is_null(total) or is_null(count):
            continue
        n, correct = whole(total), whole(count)
        if n is None or n < 1:
            continue  # check_oracle_counts names it
        if correct is None or not 0 <= correct <= n:
            raise DataError(
                f"{source}: row {index} has correct_count {count!r:.40}; it must be a whole number in [0, n_oracle "
                f"{n}] (or null)"
            )
        if not math.isclose(row[V_ORACLE], correct / n, rel_tol=0.0, abs_tol=COUNT_TOLERANCE):
            raise DataError(
                f"{source}: row {index} has V_oracle {row[V_ORACLE]!r} but correct_count {correct} of n_oracle {n} "
                f"gives {correct / n!r}; fix the edited field (or set correct_count to null to keep V_oracle)"
            )


def check_oracle_counts(rows: list[dict], source: str) -> None:
    """DataError unless every n_oracle is absent/null (an exact V; NaN is pandas' null in a parquet column) or a
    whole number >= 1 (256 or 256.0; not '256' or 256.5): the oracle-noise correction reads it."""
    for index, row in enumerate(rows):
        value = oracle_count(row)
        if not is_null(value) and (whole(value) is None or whole(value) < 1):
            raise DataError(f"{source}: row {index} has n_oracle {value!r}; it must be a whole number >= 1 (or null)")


def whole(value) -> int | None:
    """``value`` as an int when it is a whole number (256, 256.0 or a numpy scalar; not a bool or a string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return int(number) if math.isfinite(number) and number.is_integer() else None


def is_null(value) -> bool:
    """None, or a float NaN (how pandas stores a null in a numeric parquet column)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def check_prompt_lengths(lengths: list[int], max_new_tokens: int, positions: int | None, source: str) -> None:
    """DataError when a prompt plus max_new_tokens exceeds the model's positions (``positions`` None: unknown)."""
    if not positions:
        return
    for index, length in enumerate(lengths):
        if length + max_new_tokens > positions:
            raise DataError(
                f"{source}: row {index} has {length} prompt tokens + --max_new_tokens {max_new_tokens} "
                f"> the model's {positions} positions"
            )


def model_positions(model) -> int | None:
    """The model's maximum sequence length from its config, or None when it does not say."""
    config = getattr(model, "config", None)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
