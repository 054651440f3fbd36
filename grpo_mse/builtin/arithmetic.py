"""Built-in arithmetic datasets of the paper's Section 5.1 (five problem kinds, two prompt styles).

Each row is ``{"id": int, "prompt": [{"role": "user", "content": str}], "ground_truth": int}``.
Problems are medium-difficulty integer arithmetic drawn uniformly from five kinds:
two-step +/-, three-step +/-, one multiplication, exact integer division, +/- with parentheses.
"""

from __future__ import annotations

import random

KINDS = ("two_step", "three_step", "multiplication", "division", "parentheses")
STYLES = ("zero_shot", "few_shot")

ZERO_SHOT_INSTRUCTION = "Solve the arithmetic problem. Return ONLY the final integer."
FEW_SHOT_INSTRUCTION = "You are a calculator. Solve each arithmetic problem and reply with ONLY the final integer."
# One worked example per kind, in the order of KINDS.
FEW_SHOT_EXAMPLES = (
    ("15 + 25 =", 40),
    ("48 - 13 + 22 =", 57),
    ("12 * 7 =", 84),
    ("96 / 8 =", 12),
    ("50 - (18 + 7) =", 25),
)


def _sign(rng: random.Random) -> str:
    return rng.choice("+-")


def make_problem(kind: str, rng: random.Random) -> tuple[str, int]:
    """One problem of ``kind`` as ``("a op b ... =", answer)``; the answer is an exact integer."""
    if kind == "two_step":
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(1, 99)
        s1, s2 = _sign(rng), _sign(rng)
        text = f"{a} {s1} {b} {s2} {c}"
    elif kind == "three_step":
        a, b, c, d = (rng.randint(10, 99) for _ in range(4))
        text = f"{a} {_sign(rng)} {b} {_sign(rng)} {c} {_sign(rng)} {d}"
    elif kind == "multiplication":
        a, b = rng.randint(11, 99), rng.randint(2, 12)
        text = f"{a} * {b}"
    elif kind == "division":
        b, q = rng.randint(2, 12), rng.randint(2, 30)
        text = f"{b * q} / {b}"
        return text + " =", q
    elif kind == "parentheses":
        a, b, c = rng.randint(20, 99), rng.randint(1, 50), rng.randint(1, 50)
        text = f"{a} {_sign(rng)} ({b} {_sign(rng)} {c})"
    else:
        raise ValueError(f"unknown problem kind {kind!r}; choose from {', '.join(KINDS)}")
    return text + " =", int(eval(text, {"__builtins__": {}}))  # text built above from ints only


def format_prompt(problem: str, style: str) -> str:
    """User message for ``problem`` in the zero-shot or five-example few-shot template."""
    if style == "zero_shot":
        return f"{ZERO_SHOT_INSTRUCTION}\n{problem}"
    if style == "few_shot":
        shots = "\n\n".join(f"Problem: {p}\nAnswer: {a}" for p, a in FEW_SHOT_EXAMPLES)
        return f"{FEW_SHOT_INSTRUCTION}\n\n{shots}\n\nNow solve:\nProblem: {problem}"
    raise ValueError(f"unknown prompt style {style!r}; choose from {', '.join(STYLES)}")


def make_rows(n: int = 500, seed: int = 0, style: str = "zero_shot") -> list[dict]:
    """``n`` rows with kinds drawn uniformly; the same (n, seed) gives the same problems in both styles."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        problem, answer = make_problem(rng.choice(KINDS), rng)
        rows.append(
            {
                "id": i,
                "prompt": [{"role": "user", "content": format_prompt(problem, style)}],
                "ground_truth": answer,
            }
        )
    return rows
