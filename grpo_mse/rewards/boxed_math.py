"""The MATH reward rule: the last ``\\boxed{...}`` answer, compared with the row's by math-verify.

math-verify compares the answers when it is installed (exact normalised string match otherwise), in a worker process
with a limit on its own compute (grpo_mse.rewards.worker_pool): sympy can hold the GIL for ever on an answer such as
``9^{9^{9^{9}}}``, which no thread-side timeout interrupts. An answer that overruns ``GRPO_REWARD_TIMEOUT`` seconds
of CPU (default 5) scores 0.0; waiting for a worker never does. Registered in ``grpo_mse.rewards.rules.RULES`` as
``"math"`` and imported at the first row it may judge, like any rule (docs/architecture.md, "A new reward rule").
"""

from __future__ import annotations

import os
import re

from grpo_mse.rewards.rules import RewardRule

BOXED_COMMANDS = ("\\boxed", "\\fbox")
MAX_ANSWER_CHARS = 1000  # longer boxed answers score 0 without being parsed
MATH_VERIFY_TIMEOUT = 5.0  # seconds per MATH answer (GRPO_REWARD_TIMEOUT overrides)


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


def math_verify_equal(predicted: str, gold: str) -> bool:
    """math-verify equivalence of two LaTeX answers, in this process (main thread: math-verify's own timeouts)."""
    try:
        from math_verify import parse, verify
    except ImportError:
        return normalise_latex(predicted) == normalise_latex(gold)
    try:
        gold_parsed = parse(f"\\boxed{{{gold}}}")
        pred_parsed = parse(f"\\boxed{{{predicted}}}")
        if not gold_parsed or not pred_parsed:
            return normalise_latex(predicted) == normalise_latex(gold)
        return bool(verify(gold_parsed, pred_parsed))
    except Exception:  # math-verify and sympy may raise almost anything on odd inputs
        return False


def reward_timeout() -> float:
    """Seconds allowed per MATH answer: ``GRPO_REWARD_TIMEOUT`` if set to a positive number, else the default."""
    try:
        value = float(os.environ.get("GRPO_REWARD_TIMEOUT", MATH_VERIFY_TIMEOUT))
    except ValueError:
        return MATH_VERIFY_TIMEOUT
    return value if value > 0 else MATH_VERIFY_TIMEOUT


def math_equal(predicted: str, gold: str, timeout: float | None = None) -> bool:
    """math-verify equivalence in a worker process; False after ``timeout`` seconds. Any thread, never raises."""
    if normalise_latex(predicted) == normalise_latex(gold):
        return True
    from grpo_mse.rewards.worker_pool import shared_pool  # the worker processes only for a MATH answer

    limit = reward_timeout() if timeout is None else timeout
    return bool(shared_pool(("math_verify", __name__)).call(math_verify_equal, (predicted, gold), limit, default=False))


def math_reward(solution: str, gold) -> float:
    """1.0 if the last boxed answer of ``solution`` is equivalent to ``gold``, else 0.0."""
    predicted = last_boxed(solution)
    gold_text = last_boxed(str(gold)) or str(gold).strip()
    if not predicted or not gold_text or len(predicted) > MAX_ANSWER_CHARS:
        return 0.0
    return float(math_equal(predicted, gold_text))


RULE = RewardRule(
    "math",
    math_reward,
    lambda gold: f"\\boxed{{{last_boxed(str(gold)) or str(gold).strip()}}}",
    claims=lambda source: "math" in source,
)
