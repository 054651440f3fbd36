"""The reward rules on every gold of the installed GSM8K, MATH and MATH-500 (docs/real_data.md, "The reward rules on
the real rows"): ``python scripts/reward_audit.py gold DATASET --split S --out summary.json``.

For each record: the gold is parsed (GSM8K: the number after ``####``; MATH: the solution's last ``\\boxed{}``;
MATH-500: its ``answer``); the rule judges the gold written as an answer equal to itself, and math-verify does too
when asked directly (the rule's exact-string shortcut would make that check empty), with whether math-verify parsed
it at all; the gold solution text scores 1 and the same text with the final answer's last number changed (+1)
scores 0; MATH-500's ``answer`` agrees with its solution's boxed answer under the rule. Each record's time is the
rule's (math-verify in its worker with the reward timeout), and the slowest records are named.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import asdict, dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.rewards.boxed_math import BOXED_COMMANDS, last_boxed, math_equal, reward_timeout
from grpo_mse.rewards.gsm8k import GSM8K_ANSWER
from grpo_mse.rewards.rules import reward_rule, rule_for
from grpo_mse.tables.outputs import write_json
from grpo_mse.training.installed_data import DATASETS, has_answer, installed_records

SLOWEST = 10  # records named in the summary
LAST_DIGITS = re.compile(r"\d+(?!.*\d)", re.DOTALL)
BASE_SUBSCRIPT = re.compile(r"_\{?\d+\}?\s*$")  # 52_8, 4210_{5}: a number in base 8, 5
UNIT = re.compile(r"\\(?:mbox|text)\{")


@dataclass(kw_only=True)
class GoldConfig(Flags):
    """check the reward rules on every gold answer and gold solution of an installed dataset"""

    dataset: str = option(help="which dataset", positional=True, choices=tuple(DATASETS))
    split: str = option("test", choices=("train", "test"), help="which split")
    sample: int | None = option(None, minimum=1, help="a seeded random sample of N records instead of all")
    seed: int = option(0, minimum=0, help="seed of --sample")
    out: str = option(help="output JSON summary (replaced)")

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.writable_file(self.out, "--out")
        require(
            not (self.dataset == "math500" and self.split == "train"),
            "math500's train split is MATH's training set: audit it as math --split train, or use --split test",
        )


@dataclass
class GoldCheck:
    """One record's verdicts (None: not applicable to this dataset or record)."""

    id: int
    gold: str | None  # the gold answer the table carries
    parsed: bool  # the gold answer was found in the record
    self_equal: bool | None  # the rule scores the gold, written as an answer, 1
    verify_parsed: bool | None  # math-verify parses the gold (else only an exact string match can score it)
    verify_self: bool | None  # math-verify judges the gold equal to itself
    solution_scores: bool | None  # the gold solution text scores 1
    changed_scores_zero: bool | None  # the same text, final answer's last number + 1, scores 0 (None: no number)
    changed: str | None = None  # the changed final answer (MATH), when it still scores 1
    boxed: str | None = None  # MATH-500: the solution's own boxed answer
    agrees: bool | None = None  # MATH-500: the rule scores the solution's boxed answer 1 against ``answer``
    seconds: float = 0.0


def verify_details(gold: str) -> tuple[bool, bool]:
    """(math-verify parses ``\\boxed{gold}`` into something, and judges it equal to itself); in a worker."""
    from math_verify import parse, verify

    parsed = parse(f"\\boxed{{{gold}}}")
    return bool(parsed), bool(parsed) and bool(verify(parsed, parse(f"\\boxed{{{gold}}}")))


def math_verify_self(gold: str) -> tuple[bool | None, bool | None]:
    from grpo_mse.rewards.worker_pool import shared_pool

    details = shared_pool(("math_verify", __name__)).call(verify_details, (gold,), reward_timeout(), default=None)
    return (None, None) if details is None else details


def final_answer_span(rule: str, text: str) -> tuple[int, int] | None:
    """Where ``text``'s final answer stands (GSM8K: the number after the last ``####``; MATH: the last boxed
    answer's content), or None."""
    if rule == "gsm8k":
        matches = list(GSM8K_ANSWER.finditer(text))
        return matches[-1].span(1) if matches else None
    content = last_boxed(text)
    if not content:
        return None
    start = text.index(content, max(text.rfind(command) for command in BOXED_COMMANDS))
    return start, start + len(content)


def changed_final_number(rule: str, text: str) -> str | None:
    """``text`` with the last number of its final answer increased by one, or None when the answer holds none."""
    span = final_answer_span(rule, text)
    if span is None:
        return None
    answer = text[span[0] : span[1]]
    digits = LAST_DIGITS.search(answer)
    if digits is None:
        return None
    changed = answer[: digits.start()] + str(int(digits.group()) + 1) + answer[digits.end() :]
    return text[: span[0]] + changed + text[span[1] :]


def check(record: dict, row: dict | None, number: int, rule_name: str) -> GoldCheck:
    """The verdicts on one record (``row``: its VERL row, None when it gives no gold)."""
    started = time.perf_counter()
    solution = str(record.get("answer") if rule_name == "gsm8k" else record.get("solution") or "")
    if row is None:
        return GoldCheck(number, None, False, None, None, None, None, None, seconds=time.perf_counter() - started)
    gold = row["reward_model"]["ground_truth"]
    rule = reward_rule(rule_for(row["data_source"], gold))
    verify_parsed, verify_self = math_verify_self(gold) if rule_name == "math" else (None, None)
    changed = changed_final_number(rule_name, solution)
    result = GoldCheck(
        number,
        gold,
        True,
        rule.reward(rule.answer(gold), gold) == 1.0,
        verify_parsed,
        verify_self,
        rule.reward(solution, gold) == 1.0,
        None if changed is None else rule.reward(changed, gold) == 0.0,
    )
    if result.changed_scores_zero is False and rule_name == "math":
        result.changed = last_boxed(changed)
    if "answer" in record and rule_name == "math":
        result.boxed = last_boxed(solution)
        result.agrees = result.solution_scores
    result.seconds = time.perf_counter() - started
    return result


def audit(name: str, split: str, sample: int | None = None, seed: int = 0) -> list[GoldCheck]:
    """The checks of every record of dataset ``name``'s ``split`` (or of a seeded sample of ``sample`` of them)."""
    from grpo_mse.training.installed_data import installed_split

    records = installed_records(name, split)
    rows = {row["extra_info"]["id"]: row for row in installed_split(name, split).rows}
    numbers = list(range(len(records)))
    if sample is not None and sample < len(numbers):
        numbers = sorted(random.Random(seed).sample(numbers, sample))
    rule_name = DATASETS[name].rule
    if rule_name == "math":  # the workers' start-up (about 2 s each: math-verify's imports) is no record's time
        math_verify_self("1")
        math_equal("0", "1")  # the rule's own pool
    return [check(records[i], rows.get(i) if has_answer(records[i]) else None, i, rule_name) for i in numbers]


def count(checks: list[GoldCheck], field: str) -> dict:
    """{yes, no, not_applicable} of one verdict, and the ids of the ``no``s."""
    values = [getattr(c, field) for c in checks]
    return {
        "yes": sum(v is True for v in values),
        "no": sum(v is False for v in values),
        "not_applicable": sum(v is None for v in values),
        "ids_no": [c.id for c in checks if getattr(c, field) is False],
    }


def why_still_equal(gold: str) -> str:
    """Why math-verify judges the gold and its changed form equal, read off the gold's shape."""
    if BASE_SUBSCRIPT.search(gold):
        return "base subscript: math-verify drops it (52_8 equals 52_9 and 52)"
    if UNIT.search(gold):
        return "unit: math-verify drops the unit and its power (15 cm^2 equals 15 cm^3 and 15)"
    return "math-verify's reading: a numeric tolerance (1/2^98 equals 1/2^99) or a partial parse"


def summary(name: str, split: str, checks: list[GoldCheck], sample: int | None, seed: int) -> dict:
    seconds = sorted(c.seconds for c in checks)
    fields = ("parsed", "self_equal", "verify_parsed", "verify_self", "solution_scores", "changed_scores_zero")
    slowest = sorted(checks, key=lambda c: c.seconds, reverse=True)[:SLOWEST]
    return {
        "dataset": name,
        "split": split,
        "records": len(checks),
        "sample": None if sample is None else {"n": sample, "seed": seed},
        "reward_timeout_s": reward_timeout(),
        "counts": {field: count(checks, field) for field in fields},
        "changed_still_scores": [
            {"id": c.id, "gold": c.gold, "changed": c.changed, "why": why_still_equal(c.gold)}
            for c in checks
            if c.changed_scores_zero is False
        ],
        "math500_disagreements": [
            {"id": c.id, "answer": c.gold, "boxed": c.boxed} for c in checks if c.agrees is False
        ],
        "verify_unparsed_golds": [{"id": c.id, "gold": c.gold} for c in checks if c.verify_parsed is False],
        "seconds": {
            "total": round(sum(seconds), 3),
            "mean": round(sum(seconds) / max(1, len(seconds)), 5),
            "median": round(seconds[len(seconds) // 2], 5) if seconds else None,
            "max": round(seconds[-1], 4) if seconds else None,
        },
        "slowest": [{**asdict(c), "seconds": round(c.seconds, 4)} for c in slowest],
    }


def main(config: GoldConfig) -> dict:
    started = time.time()
    checks = audit(config.dataset, config.split, config.sample, config.seed)
    result = summary(config.dataset, config.split, checks, config.sample, config.seed)
    result["wall_seconds"] = round(time.time() - started, 1)
    write_json(config.out, result)
    counts = result["counts"]
    print(
        f"{config.dataset} {config.split}: {len(checks)} records; parsed {counts['parsed']['yes']}, "
        f"self-equal {counts['self_equal']['yes']}, solution scores 1 {counts['solution_scores']['yes']}, "
        f"changed scores 0 {counts['changed_scores_zero']['yes']} (no number: "
        f"{counts['changed_scores_zero']['not_applicable']}); {result['seconds']['mean'] * 1000:.1f} ms/record, "
        f"slowest {result['seconds']['max']:.2f} s -> {config.out}"
    )
    return result
