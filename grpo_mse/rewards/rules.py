"""Answer-checking rules of training and gradient evaluation: arithmetic (last integer), GSM8K ("####"), MATH (boxed).

``score(data_source, solution, ground_truth)`` picks the rule from the data source and returns
1.0 or 0.0; anything that cannot be parsed scores 0.0. MATH answers are compared with
math-verify when it is installed (exact normalised string match otherwise). math-verify's
timeouts use ``signal.alarm``, which only works in the main thread; VERL calls reward functions
from executor threads, so there the timeouts are disabled and the inputs are length-capped.
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction

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


GSM8K_ANSWER = re.compile(r"####\s*\$?\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
BOXED_COMMANDS = ("\\boxed", "\\fbox")
MAX_ANSWER_CHARS = 1000  # longer boxed answers are not sent to sympy (no timeout in threads)
MATH_VERIFY_TIMEOUT = 5  # seconds, main thread only


def _number(text: str) -> Fraction | None:
    """``text`` as an exact number (commas, a leading ``$`` and a trailing ``.`` allowed), or None."""
    cleaned = str(text).strip().replace(",", "").lstrip("$").rstrip(".").strip()
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def extract_gsm8k(text: str) -> str | None:
    """The number after the last ``####`` in ``text`` (commas removed), or None."""
    matches = GSM8K_ANSWER.findall(text or "")
    return matches[-1].replace(",", "") if matches else None


def gsm8k_reward(solution: str, gold) -> float:
    """1.0 if the number after the last ``####`` equals ``gold`` (numerically), else 0.0."""
    predicted = extract_gsm8k(solution)
    gold_text = extract_gsm8k(str(gold)) or str(gold)
    if predicted is None:
        return 0.0
    a, b = _number(predicted), _number(gold_text)
    return float(a is not None and b is not None and a == b)


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at ``text[start] == '{'``, or None if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed x``) in ``text``."""
    text = text or ""
    best = max(((text.rfind(cmd), cmd) for cmd in BOXED_COMMANDS), default=(-1, ""))
    pos, cmd = best
    if pos < 0:
        return None
    rest = pos + len(cmd)
    if text[rest : rest + 1] == "{":
        content = _braced(text, rest)
    elif text[rest : rest + 1] == " ":
        content = re.split(r"[\s$]", text[rest + 1 :].lstrip(), maxsplit=1)[0]
    else:
        content = None
    return content.strip() if content else None


def normalise_latex(answer: str) -> str:
    """Light normalisation used when math-verify is unavailable."""
    text = str(answer).strip().strip("$").replace(" ", "")
    for old, new in (("\\left", ""), ("\\right", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\!", "")):
        text = text.replace(old, new)
    text = re.sub(r"\\text\{(.*?)\}", r"\1", text)
    return text.rstrip(".")


def math_equal(predicted: str, gold: str) -> bool:
    """math-verify equivalence of two LaTeX answers; works from any thread, never raises."""
    try:
        from math_verify import parse, verify
    except ImportError:
        return normalise_latex(predicted) == normalise_latex(gold)
    in_main = threading.current_thread() is threading.main_thread()
    limit = MATH_VERIFY_TIMEOUT if in_main else None
    try:
        gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=limit)
        pred_parsed = parse(f"\\boxed{{{predicted}}}", parsing_timeout=limit)
        if not gold_parsed or not pred_parsed:
            return normalise_latex(predicted) == normalise_latex(gold)
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=limit))
    except Exception:  # math-verify and sympy may raise almost anything on odd inputs
        return False


def math_reward(solution: str, gold) -> float:
    """1.0 if the last boxed answer of ``solution`` is equivalent to ``gold``, else 0.0."""
    predicted = last_boxed(solution)
    gold_text = last_boxed(str(gold)) or str(gold).strip()
    if not predicted or not gold_text or len(predicted) > MAX_ANSWER_CHARS:
        return 0.0
    return float(math_equal(predicted, gold_text))


def rule_for(data_source: str, ground_truth=None) -> str:
    """Rule name for a data source: ``arithmetic``, ``gsm8k`` or ``math``."""
    source = str(data_source or "").lower()
    if source.startswith("arithmetic"):
        return "arithmetic"
    if "gsm8k" in source:
        return "gsm8k"
    if "math" in source:
        return "math"
    return "arithmetic" if _number(str(ground_truth)) is not None else "math"


RULES = {"arithmetic": last_integer_reward, "gsm8k": gsm8k_reward, "math": math_reward}


def score(data_source: str, solution: str, ground_truth) -> float:
    """0/1 reward of ``solution`` against ``ground_truth`` under the rule of ``data_source``."""
    try:
        return float(RULES[rule_for(data_source, ground_truth)](solution or "", ground_truth))
    except Exception:
        return 0.0


DEFAULT_SOURCE = "arithmetic"  # rows without a data_source (the built-in data, the original's tables): last integer


def row_reward(row: dict, solution: str) -> float:
    """0/1 reward of ``solution`` for a table row: ``score`` under its ``data_source`` (else DEFAULT_SOURCE)."""
    return score(row.get("data_source") or DEFAULT_SOURCE, solution, row["ground_truth"])
