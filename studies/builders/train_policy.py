"""Training-demo policy: the built-in policy fine-tuned to carry a format flaw that GRPO can remove.

The shipped policy (assets/tiny_policy) is too small for GRPO to raise its held-out accuracy: what it
learns on training prompts is memorised, not carried over to new problems. This builder makes a
second policy whose main error is a behaviour rather than missing facts. Starting from the shipped
weights and tokenizer, it fine-tunes briefly on zero-shot arithmetic in which a fixed share of the
targets, chosen at random and independent of the prompt, append a spurious one-digit number
(``"42 7"``). The last-integer reward scores such an answer 0, so the flaw costs accuracy on every
prompt alike, and GRPO can remove it everywhere by learning to stop after the answer.
"""

from __future__ import annotations

import random

from grpo_mse.builtin.arithmetic import make_rows
from studies.builders import defaults
from studies.builders.tiny_policy import TRAIN_DATA_SEED, fine_tune_and_save

FLAW_FRACTION = defaults.FLAW_FRACTION
FLAW_SEPARATOR = " "
DEFAULT_BASE = defaults.TRAIN_BASE
DEFAULT_STEPS = defaults.TRAIN_STEPS
DEFAULT_LR = defaults.TRAIN_LR
DEFAULT_ROWS = 20000


def spurious_number(answer: int, rng: random.Random) -> int:
    """A digit 0-9 that differs from ``answer``, so the flawed text's last integer is wrong."""
    return rng.choice([d for d in range(10) if d != answer])


def add_flaws(rows: list[dict], fraction: float = FLAW_FRACTION, seed: int = 0) -> list[dict]:
    """Copies of ``rows`` with a ``"target"`` text: exactly ``round(fraction * len(rows))`` of them flawed.

    A flawed target is ``f"{answer} {d}"`` with ``d`` a random digit other than the answer; the
    others are the plain answer. The flawed rows are a uniform random subset (``random.Random(seed)``).
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    flawed = set(rng.sample(range(len(rows)), round(fraction * len(rows))))
    out = []
    for i, row in enumerate(rows):
        answer = int(row["ground_truth"])
        target = f"{answer}{FLAW_SEPARATOR}{spurious_number(answer, rng)}" if i in flawed else str(answer)
        out.append({**row, "target": target, "flawed": i in flawed})
    return out


def build_and_save(
    out_dir,
    base_dir=DEFAULT_BASE,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    lr: float = DEFAULT_LR,
    fraction: float = FLAW_FRACTION,
    n_rows: int = DEFAULT_ROWS,
    **train_kwargs,
):
    """Load the base policy, fine-tune it on flawed zero-shot targets from ``seed``, save to ``out_dir``."""

    def rows_for(_tokenizer):
        return add_flaws(make_rows(n_rows, seed=TRAIN_DATA_SEED, style="zero_shot"), fraction, seed=seed)

    return fine_tune_and_save(base_dir, out_dir, rows_for, seed, steps, lr, **train_kwargs)
