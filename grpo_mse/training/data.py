"""VERL parquet rows from the built-in arithmetic data and from GSM8K- and MATH-format files.

A VERL row is ``{"data_source", "prompt": [{"role", "content"}], "ability",
"reward_model": {"style": "rule", "ground_truth": str}, "extra_info": {"split", "index", ...}}``.
``data_source`` selects the reward rule in grpo_mse.rewards.rules.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import ClassVar

from grpo_mse import cli
from grpo_mse.builtin.arithmetic import STYLES, make_rows
from grpo_mse.errors import DataError, require
from grpo_mse.flags import Flags, option
from grpo_mse.rewards.boxed_math import last_boxed
from grpo_mse.rewards.gsm8k import extract_gsm8k
from grpo_mse.rewards.rules import rule_for
from grpo_mse.tables.inputs import read_file
from grpo_mse.tables.outputs import write_atomic

SOURCES = ("arithmetic", "gsm8k", "math", "math500")  # the last three also read the installed files (installed_data)
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


def read_records(path: str, flag: str) -> list[dict]:
    """Records of a local ``.jsonl``, ``.json`` or ``.parquet`` file (the shared table reader) given as ``flag``;
    DataError when missing, a folder, unreadable or empty."""
    if os.path.isdir(path):  # it exists: saying "not found" would send the user looking for a typo
        saved = os.path.isfile(os.path.join(path, "dataset_info.json")) or os.path.isfile(
            os.path.join(path, "dataset_dict.json")
        )
        kind = "a saved `datasets` folder" if saved else "a folder"
        raise DataError(
            f"{flag} {path} is {kind}, not a file; give a .jsonl, .json or .parquet file"
            + (" (write one with the Dataset's to_json or to_parquet)" if saved else "")
        )
    if not os.path.isfile(path):
        raise DataError(f"{flag} {path}: file not found")
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


def _kind(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "null"
    return "empty" if isinstance(value, str) else f"a {type(value).__name__}, not text"


def prompt_texts(records: list[dict], name: str, split: str) -> list[str]:
    """The stripped ``name`` field of every record; a DataError counting the records whose field is null (None,
    NaN from parquet), empty or blank, or not a string (they would become prompts such as "None Let's think..."),
    naming the first one."""
    texts = [_field(rec, name, split, i) for i, rec in enumerate(records)]
    bad = [i for i, value in enumerate(texts) if not isinstance(value, str) or not value.strip()]
    if bad:
        more = f" (and {len(bad) - 1} more of {len(records)} records)" if len(bad) > 1 else ""
        raise DataError(
            f"{split} record {bad[0]}: {name!r} is {_kind(texts[bad[0]])}{more}; every prompt must be non-empty "
            "text: fix or filter the file"
        )
    return [value.strip() for value in texts]


def gsm8k_rows(records: list[dict], split: str, data_source: str = GSM8K_SOURCE) -> list[dict]:
    """GSM8K-format records (``question``, ``answer`` ending in ``#### N``) as VERL rows."""
    rows, questions = [], prompt_texts(records, "question", split)
    for i, rec in enumerate(records):
        gold = extract_gsm8k(str(_field(rec, "answer", split, i)))
        if gold is None:
            raise DataError(f"{split} record {i}: no '#### <number>' in the answer field")
        content = f"{questions[i]} {GSM8K_INSTRUCTION}"
        rows.append(verl_row(content, gold, data_source, split, i, answer=str(rec["answer"])))
    return rows


def math_rows(records: list[dict], split: str, data_source: str = MATH_SOURCE) -> list[dict]:
    """MATH-format records (``problem`` and ``answer`` or a ``solution`` with ``\\boxed{}``) as VERL rows."""
    rows, problems = [], prompt_texts(records, "problem", split)
    for i, rec in enumerate(records):
        gold = _text(rec.get("answer")) or last_boxed(_text(rec.get("solution")) or "")
        if not gold:
            raise DataError(f"{split} record {i}: no answer field and no \\boxed{{}} in the solution")
        content = f"{problems[i]} {MATH_INSTRUCTION}"
        extra = {k: _text(rec.get(k)) for k in ("level", "type", "subject", "unique_id") if _text(rec.get(k))}
        rows.append(verl_row(content, gold, data_source, split, i, **extra))
    return rows


def check_data_source(source: str, data_source: str) -> None:
    """DataError when ``data_source`` would select another reward rule than ``source``'s (the rule follows the name)."""
    rule = rule_for(data_source)
    if rule != source:
        raise DataError(
            f"--data_source {data_source!r} would be scored with the {rule} rule, not {source}; "
            f"the reward rule follows the name, so include {source!r} in it"
        )


def file_splits(source: str, train_file: str, test_file: str, limit: int | None = None, data_source=None) -> dict:
    """Train/test rows converted from local GSM8K- or MATH-format files."""
    convert = {"gsm8k": gsm8k_rows, "math": math_rows}[source]
    kwargs = {"data_source": data_source} if data_source else {}
    return {
        split: convert(read_records(path, f"--{split}_file")[:limit], split, **kwargs)
        for split, path in (("train", train_file), ("test", test_file))
    }


def parquet_bytes(rows: list[dict]) -> bytes:
    """VERL rows as the bytes of a parquet file (equal rows give equal bytes)."""
    import io

    import pandas as pd

    buffer = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buffer, index=False)
    return buffer.getvalue()


def write_splits(splits: dict, out_dir: str, overwrite: bool = False) -> dict:
    """Write each split's rows to ``out_dir/{split}.parquet``; return {split: path}.

    An existing file with other content is replaced only with ``overwrite`` (else UsageError, before
    any file is written); a file with the same content is left as it is.
    """
    paths = {split: os.path.join(out_dir, f"{split}.parquet") for split in splits}
    contents = {split: parquet_bytes(rows) for split, rows in splits.items()}
    differing = [paths[s] for s in splits if os.path.isfile(paths[s]) and not _same(paths[s], contents[s])]
    require(
        overwrite or not differing,
        f"{', '.join(differing)} already hold{'s' if len(differing) == 1 else ''} "
        f"other data; pass --overwrite to replace, or choose another --out_dir",
    )
    for split, path in paths.items():
        if not (os.path.isfile(path) and _same(path, contents[split])):
            write_atomic(path, contents[split])
    return paths


def _same(path: str, content: bytes) -> bool:
    with open(path, "rb") as handle:
        return handle.read() == content


@dataclass(kw_only=True)
class PrepareDataConfig(Flags):
    """Policy_Optimization/prepare_data.py: which data to convert to VERL parquet files, and where."""

    source: str = option(
        "arithmetic",
        choices=SOURCES,
        help="arithmetic: the built-in data; gsm8k, math: convert --train_file and --test_file, or without them the "
        "installed files (requirements-data.txt); math500: MATH's training set and MATH-500 as test, installed",
    )
    out_dir: str = option(help="writes train.parquet and test.parquet here")
    style: str = option("zero_shot", choices=STYLES, help="arithmetic prompt style")
    n_train: int = option(4096, minimum=1, help="arithmetic training problems")
    n_test: int = option(500, minimum=1, help="arithmetic test problems")
    seed: int = option(0, help="arithmetic test seed (train uses seed+1)")
    train_file: str | None = option(None, help="GSM8K/MATH training file (.jsonl, .json or .parquet)")
    test_file: str | None = option(None, help="GSM8K/MATH test file (.jsonl, .json or .parquet)")
    limit: int | None = option(None, minimum=1, help="keep only the first N records per file")
    data_source: str | None = option(None, help="override the data_source name (GSM8K/MATH)")
    overwrite: bool = option(False, help="replace train.parquet/test.parquet in --out_dir when they hold other data")

    ARITHMETIC_ONLY: ClassVar[tuple[str, ...]] = ("style", "n_train", "n_test", "seed")

    def __post_init__(self) -> None:
        super().__post_init__()  # choices and bounds
        files = [f"--{name}" for name in ("train_file", "test_file") if getattr(self, name)]
        if self.source == "arithmetic":
            require(
                not files,
                f"{' and '.join(files)} are read with --source gsm8k or --source math; the default "
                f"--source arithmetic writes the built-in data (add --source)",
            )
            require(
                self.limit is None, "--limit is for GSM8K/MATH files; --n_train and --n_test size the arithmetic data"
            )
            require(not self.data_source, "--data_source is for GSM8K/MATH files only")
        else:
            require(
                len(files) != 1,
                f"--source {self.source} converts --train_file and --test_file, or with neither the installed "
                f"{self.source} files: give both or none",
            )
            require(
                not (files and self.source == "math500"),
                "--source math500 reads the installed MATH and MATH-500 files; convert your own with --source math",
            )
            defaults = {spec.name: spec.default for spec in dataclasses.fields(self)}
            changed = [f"--{name}" for name in self.ARITHMETIC_ONLY if getattr(self, name) != defaults[name]]
            require(
                not changed,
                f"{', '.join(changed)} appl{'ies' if len(changed) == 1 else 'y'} to --source "
                f"arithmetic only; --limit keeps the first N records of each file",
            )
            if self.data_source:
                check_data_source("math" if self.source == "math500" else self.source, self.data_source)
        cli.writable_dir(self.out_dir, "--out_dir")
