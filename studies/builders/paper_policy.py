"""Paper-regime policy: a built-in policy whose responses have the structure of an instruction-tuned LLM's.

Why it exists. With a 0/1 reward, per sample MSE_vanilla - MSE_oracle = V^2 (2 E[||s||^2 | G=1] - E||s||^2):
the oracle baseline helps when correct responses carry at least half the average squared score norm
(the paper's Assumption 2). A real LLM's response is long and most of its tokens (phrasing, the worked
form) are sampled with entropy whether or not the final answer is right, so correct and wrong responses
have similar score norms. The tiny policy (assets/tiny_policy) answers with a few near-deterministic
digits, so its correct answers carry almost no score norm and the assumption fails.

Design, from that mechanism (docs/paper_regime.md records both designs and their runs):

* **A lead-in of fixed token length before the answer** (design 1, stage 1): ``LEAD_IN_WORDS`` words, each
  drawn uniformly and independently from ``WORDS`` (each `` word`` one token of the tiny tokenizer), then
  ``":"`` and the answer: ``" the final with each problem in ONLY and: 42"``. Each lead-in token carries
  log 16 nats that cannot decide correctness; the answer starts at the same offset in every response.
  Stage 1 fine-tunes the tiny policy on the demo's 500 zero-shot problems with correct answers
  (``training_rows``, 600 steps): the model memorises its task's problems, as an instruction-tuned LLM has
  seen its task's distribution (the tiny model does not generalise this arithmetic). V measures this policy on
  these prompts, not generalisation.
* **Errors as moderate-probability slips** (design 2, stage 2): design 1's wrong answers were rare, improbable
  digits whose score norm, under a confident model, dwarfed the lead-in's. Stage 2 fine-tunes on the same
  problems where each has a solve rate q ~ U(0.1, 0.9) and the other copies end in one slip answer (the
  correct one +- 10, ``slip_plan``/``slip_rows``), so the policy errs by a sampled branch of probability ~1 - q,
  the way an LLM's wrong answers are branches it takes on a fair share of its attempts. V's spread across
  prompts (mean ~0.5) is set by the data. Stage 2 ran until >= 95% of sampled answers were correct or the
  slip (1,600 steps).
* **Settled slips** (design 3, stage 3): at stage 2's constant rate, 4.4% of answers were still off target
  (neither correct nor the slip), and their large score norms count against the baselined estimators only.
  Stage 3 continues on the same slip mixture for 1,600 steps with the rate decaying to 0 (cosine), so the
  weights settle on the targets' distribution (no off-target answer in 768 samples after it).

The policy was built to have this structure, so its agreement with the paper demonstrates the mechanism
rather than confirming the paper independently.
"""

from __future__ import annotations

import random

from grpo_mse.builtin.arithmetic import make_rows
from studies.builders import defaults
from studies.builders import tiny_policy as tp

# Sixteen words of the prompts' vocabulary; each is one token (with its leading space) of the tiny tokenizer.
WORDS = (
    "and", "are", "each", "final", "in", "the", "with", "reply",
    "solve", "problem", "integer", "arithmetic", "calculator", "Return", "Solve", "ONLY",
)  # fmt: skip
LEAD_IN_WORDS = defaults.PAPER_LEAD_IN_WORDS
ANSWER_MARK = ":"
DEFAULT_BASE = defaults.TRAIN_BASE
DEFAULT_STEPS = defaults.PAPER_STEPS
DEFAULT_LR = defaults.PAPER_LR
DEFAULT_SLIP_STEPS = defaults.PAPER_SLIP_STEPS
DEFAULT_SETTLE_STEPS = defaults.PAPER_SETTLE_STEPS
PROBLEMS = 500  # every row of data/arithmetic_zero_shot.jsonl
COPIES = 40
SLIP_SHIFTS = (-10, 10)  # a carry slip: the answer's tens digit off by one
SOLVE_RATE_RANGE = (0.1, 0.9)  # each problem's share of correct targets, uniform in this range
SLIP_SEED_OFFSET = 1000  # the slip stage draws its plan and lead-ins from seed + this (stage 1 uses seed)
SETTLE_SEED_OFFSET = 2000  # the settle stage draws its batches from seed + this (same rows as the slip stage)


def lead_in(rng: random.Random, n_words: int = LEAD_IN_WORDS) -> str:
    """``n_words`` words drawn uniformly and independently from ``WORDS``, each with a leading space."""
    return "".join(f" {rng.choice(WORDS)}" for _ in range(n_words))


def response(answer: int, rng: random.Random, n_words: int = LEAD_IN_WORDS) -> str:
    """The trained response text: lead-in, ``":"``, a space, the answer (the last integer of the text)."""
    return f"{lead_in(rng, n_words)}{ANSWER_MARK} {answer}"


def training_rows(problems: int = PROBLEMS, copies: int = COPIES, seed: int = 0, n_words: int = LEAD_IN_WORDS):
    """The demo's first ``problems`` zero-shot rows, each ``copies`` times with its own ``"target"`` response
    (lead-ins drawn from ``random.Random(seed)``)."""
    rng = random.Random(seed)
    rows = make_rows(problems, seed=0, style="zero_shot")
    return [{**row, "target": response(int(row["ground_truth"]), rng, n_words)} for row in rows for _ in range(copies)]


def slip_plan(problems: int = PROBLEMS, copies: int = COPIES, seed: int = 0) -> list[tuple[int, int]]:
    """Per problem ``(n_correct, slip)``: ``n_correct = round(q * copies)`` with q ~ U(SOLVE_RATE_RANGE), and
    the slip answer ``answer + shift``, shift drawn from SLIP_SHIFTS (``random.Random(seed + SLIP_SEED_OFFSET)``)."""
    rng = random.Random(seed + SLIP_SEED_OFFSET)
    rows = make_rows(problems, seed=0, style="zero_shot")
    low, high = SOLVE_RATE_RANGE
    return [
        (round(rng.uniform(low, high) * copies), int(row["ground_truth"]) + rng.choice(SLIP_SHIFTS)) for row in rows
    ]


def slip_rows(problems: int = PROBLEMS, copies: int = COPIES, seed: int = 0, n_words: int = LEAD_IN_WORDS):
    """Stage 2's rows: each demo problem ``copies`` times, ``n_correct`` of them with the correct answer and the
    rest with the problem's slip answer (``slip_plan``), each copy with a fresh lead-in."""
    rng = random.Random(seed + SLIP_SEED_OFFSET + 1)
    rows = make_rows(problems, seed=0, style="zero_shot")
    out = []
    for row, (n_correct, slip) in zip(rows, slip_plan(problems, copies, seed)):
        answers = [int(row["ground_truth"])] * n_correct + [slip] * (copies - n_correct)
        out += [{**row, "target": response(answer, rng, n_words)} for answer in answers]
    return out


def check_single_token_words(tokenizer) -> None:
    """Raise if some `` word`` of ``WORDS`` is not exactly one token (the lead-in's length would vary)."""
    split = [w for w in WORDS if len(tokenizer(f" {w}", add_special_tokens=False)["input_ids"]) != 1]
    if split:
        raise ValueError(f"lead-in words that are not single tokens of this tokenizer: {', '.join(split)}")


def build_and_save(
    out_dir,
    base_dir=DEFAULT_BASE,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    lr: float = DEFAULT_LR,
    problems: int = PROBLEMS,
    copies: int = COPIES,
    slip_steps: int = DEFAULT_SLIP_STEPS,
    settle_steps: int = DEFAULT_SETTLE_STEPS,
    **train_kwargs,
):
    """Run the non-empty stages in order, each from the last one's saved weights, and save to ``out_dir``:
    stage 1 (``steps``, constant rate) on lead-in + correct-answer targets, stage 2 (``slip_steps``, constant
    rate) on the slip mixture, stage 3 (``settle_steps``) on the same slip mixture with the rate decaying to 0
    (cosine). The first stage run starts from ``base_dir`` (with ``steps=0``: a saved stage-1 policy, etc.).
    ``train_kwargs`` apply to every stage, except ``log_every``/``callback``: to the last stage only."""

    def rows_for(make):
        def rows(tokenizer):
            check_single_token_words(tokenizer)
            return make(problems, copies, seed=seed)

        return rows

    stages = [
        (steps, rows_for(training_rows), seed, "constant"),
        (slip_steps, rows_for(slip_rows), seed + SLIP_SEED_OFFSET, "constant"),
        (settle_steps, rows_for(slip_rows), seed + SETTLE_SEED_OFFSET, "cosine"),
    ]
    stages = [stage for stage in stages if stage[0]]
    if not stages:
        raise ValueError("steps, slip_steps and settle_steps are all 0: nothing to build")
    logging = ("log_every", "callback")  # reported for the last stage only; the weights do not depend on them
    for i, (n_steps, make_rows_for, stage_seed, schedule) in enumerate(stages):
        last = i == len(stages) - 1
        kwargs = {k: v for k, v in train_kwargs.items() if last or k not in logging}
        result = tp.fine_tune_and_save(
            base_dir, out_dir, make_rows_for, stage_seed, n_steps, lr, schedule=schedule, **kwargs
        )
        base_dir = out_dir
    return result
