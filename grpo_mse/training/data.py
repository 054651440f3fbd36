"""VERL parquet rows from the built-in arithmetic data and from GSM8K- and MATH-format files.

A VERL row is ``{"data_source", "prompt": [{"role", "content"}], "ability",
"reward_model": {"style": "rule", "ground_truth": str}, "extra_info": {"split", "index", ...}}``.
``data_source`` selects the reward rule in grpo_mse.rewards.rules.
"""

from __future__ import annotations

import os

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.rewards.rules import extract_gsm8k, last_boxed, rule_for
from grpo_mse.tables.inputs import DataError, read_file

SOURCES = ("arithmetic", "gsm8k", "math")
GSM8K_SOURCE = "openai/gsm8k"
MATH_SOURCE = "math"
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def verl_row(content: str | list, ground_truth, data_source: str, split: str, index: int, **extra) -> dict:
    """One VERL row; ``content`` is the user message text or a full chat message list."""
    prompt = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return {
        "data_source": data_source,
        "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(ground_truth)},
        "extra_info": {"split": split, "index": int(index), **extra},
    }


def arithmetic_splits(n_train: int, n_test: int, seed: int = 0, style: str = "zero_shot") -> dict:
    """Train/test rows of the built-in data; test = ``make_rows(n_test, seed)``, train avoids test prompts."""
    source = f"arithmetic_{style}"
    test = make_rows(n_test, seed, style)
    held_out = {r["prompt"][0]["content"] for r in test}
    pool = make_rows(2 * n_train + 100, seed + 1, style)
    train = [r for r in pool if r["prompt"][0]["content"] not in held_out][:n_train]
    if len(train) < n_train:
        raise ValueError(f"could only draw {len(train)} training problems distinct from the test set")
    return {
        split: [verl_row(r["prompt"], r["ground_truth"], source, split, i, id=int(r["id"])) for i, r in enumerate(rows)]
        for split, rows in (("train", train), ("test", test))
    }


def read_records(path: str) -> list[dict]:
    """Records of a local ``.jsonl``, ``.json`` or ``.parquet`` file (the shared table reader); DataError when
    missing, unreadable or empty."""
    if not os.path.isfile(path):
        raise DataError(f"file not found: {path}")
    records = read_file(path)
    if not records or not all(isinstance(r, dict) for r in records):
        raise DataError(f"{path}: no records (expected JSON objects)")
    return records


def _field(record: dict, name: str, split: str, index: int):
    if name not in record:
        raise DataError(f"{split} record {index}: no {name!r} field (have {', '.join(map(str, record))})")
    return record[name]


def _text(value) -> str | None:
    """``value`` as stripped text, or None when missing (None, NaN from parquet, empty)."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    text = str(value).strip()
    return text or None


def gsm8k_rows(records: list[dict], split: str, data_source: str = GSM8K_SOURCE) -> list[dict]:
    """GSM8K-format records (``question``, ``answer`` ending in ``#### N``) as VERL rows."""
    rows = []
    for i, rec in enumerate(records):
        gold = extract_gsm8k(str(_field(rec, "answer", split, i)))
        if gold is None:
            raise DataError(f"{split} record {i}: no '#### <number>' in the answer field")
        content = f"{str(_field(rec, 'question', split, i)).strip()} {GSM8K_INSTRUCTION}"
        rows.append(verl_row(content, gold, data_source, split, i, answer=str(rec["answer"])))
    return rows


def math_rows(records: list[dict], split: str, data_source: str = MATH_SOURCE) -> list[dict]:
    """MATH-format records (``problem`` and ``answer`` or a ``solution`` with ``\\boxed{}``) as VERL rows."""
    rows = []
    for i, rec in enumerate(records):
        gold = _text(rec.get("answer")) or last_boxed(_text(rec.get("solution")) or "")
        if not gold:
            raise DataError(f"{split} record {i}: no answer field and no \\boxed{{}} in the solution")
        content = f"{str(_field(rec, 'problem', split, i)).strip()} {MATH_INSTRUCTION}"
        extra = {k: _text(rec.get(k)) for k in ("level", "type", "subject") if _text(rec.get(k))}
        rows.append(verl_row(content, gold, data_source, split, i, **extra))
    return rows


def check_data_source(source: str, data_source: str) -> None:
    """DataError when ``data_source`` would select another reward rule than ``source``'s (the rule follows the name)."""
    rule = rule_for(data_source)
    if rule != source:
        raise DataError(f"--data_source {data_source!r} would be scored with the {rule} rule, not {source}; "
                        f"the reward rule follows the name, so include {source!r} in it")


def file_splits(source: str, train_file: str, test_file: str, limit: int | None = None, data_source=None) -> dict:
    """Train/test rows converted from local GSM8K- or MATH-format files."""
    convert = {"gsm8k": gsm8k_rows, "math": math_rows}[source]
    kwargs = {"data_source": data_source} if data_source else {}
    return {
        split: convert(read_records(path)[:limit], split, **kwargs)
        for split, path in (("train", train_file), ("test", test_file))
    }


def write_parquet(rows: list[dict], path: str) -> str:
    """Write VERL rows to ``path`` (parent folders created) and return it."""
    import pandas as pd

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path
