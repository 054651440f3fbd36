"""Are two runs' per-prompt CSVs runs of the same prompts and model, and is each CSV its own run's? Checked by
scripts/compare_tracecov_runs.py before any statistics: paired traces of other prompts or another model say
nothing about agreement, however the tests come out (issue 54: a zero-shot run "agreed" with a few-shot run).

What a run says about itself: its CSV's ``prompt_hash`` column (each prompt's own text, run_tracecov.py since
issue 54), and the run's JSON beside it (``{base}.json`` for ``{base}_per_prompt.csv``): the model's and the
oracle table's fingerprints and the mean trace of each estimator and K. The run-wide fingerprints stay in the
JSON, not repeated on every CSV row, so that the CSV stays one tidy row per (prompt, K, estimator).

Refused (a DataError, one line):
- a shared prompt whose hash differs between the runs (other prompts under the same ids: another table);
- different model fingerprints;
- different oracle-table fingerprints where a CSV has no hashes to show that the shared prompts are the same
  (with hashes on both sides, another file of the same prompts, e.g. the table as parquet, is only noted);
- a CSV whose per-(estimator, K) mean traces are not its JSON's (the CSV was edited, or the JSON is another
  run's).
What cannot be checked (no hashes, no JSON: e.g. a CSV copied alone, or one written before issue 54) is named in
a note; the comparison goes on.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from grpo_mse.errors import DataError
from grpo_mse.tables.outputs import read_json
from studies.audits.run_agreement import prompt_key, read_rows

CSV_SUFFIX = "_per_prompt.csv"
MEAN_RTOL = 1e-9  # the JSON's means and the CSV's are sums of the same floats, in another order at most


@dataclass(frozen=True, kw_only=True)
class RunSource:
    """What one run's files say about the run behind a per-prompt CSV."""

    csv: str
    json: str | None  # the run's JSON beside the CSV; None when there is none
    model: str | None = None  # the config's model and fingerprints (None: no JSON, or a JSON without them)
    model_fingerprint: str | None = None
    table: str | None = None
    table_fingerprint: str | None = None
    means: dict | None = None  # {(estimator, K): mean trace} of the JSON
    hashes: dict | None = None  # {(prompt_index, id): prompt_hash} of the CSV; None without the column


def json_beside(csv_path: str) -> str | None:
    """``{base}.json`` for ``{base}_per_prompt.csv`` when that file exists."""
    if not csv_path.endswith(CSV_SUFFIX):
        return None
    path = csv_path[: -len(CSV_SUFFIX)] + ".json"
    return path if os.path.isfile(path) else None


def read_source(csv_path: str) -> RunSource:
    """The run behind ``csv_path``: its prompts' hashes and, when its JSON is beside it, the JSON's identity."""
    rows = read_rows(csv_path)
    hashes = (
        {(row.get("prompt_index"), row["id"]): row["prompt_hash"] for row in rows} if "prompt_hash" in rows[0] else None
    )
    path = json_beside(csv_path)
    if path is None:
        return RunSource(csv=csv_path, json=None, hashes=hashes)
    run = read_json(path, ("K_list", "conditional_on_x", "config"), "run_tracecov.py results")
    config, k_list = run["config"], run["K_list"]
    means = {(name, k): value for name, values in run["conditional_on_x"].items() for k, value in zip(k_list, values)}
    return RunSource(
        csv=csv_path,
        json=path,
        model=config.get("model"),
        model_fingerprint=config.get("model_fingerprint"),
        table=config.get("oracle_table"),
        table_fingerprint=config.get("oracle_table_fingerprint"),
        means=means,
        hashes=hashes,
    )


def check_own_json(source: RunSource, traces: dict) -> None:
    """DataError unless the CSV's mean trace of each (estimator, K) is its JSON's (``traces``: ``read_traces``)."""
    if source.means is None:
        return
    cells: dict[tuple[str, int], list[float]] = {}
    for (name, k, _), value in traces.items():
        cells.setdefault((name, k), []).append(value)
    for cell in sorted(cells.keys() | source.means.keys()):
        in_csv = sum(cells[cell]) / len(cells[cell]) if cell in cells else None
        in_json = source.means.get(cell)
        if in_csv is None or in_json is None or not math.isclose(in_csv, in_json, rel_tol=MEAN_RTOL, abs_tol=1e-300):
            shown = ["none" if v is None else f"{v:.6g}" for v in (in_csv, in_json)]
            raise DataError(
                f"{source.csv} is not the run of {source.json} beside it (mean trace of {cell[0]} at K {cell[1]}: "
                f"{shown[0]} in the CSV, {shown[1]} in the JSON): the CSV was changed or the JSON is another run's; "
                "compare the CSV a run wrote, or move the JSON away"
            )


def check_same_run_inputs(a: RunSource, b: RunSource, by_id: bool) -> list[str]:
    """DataError when the runs' shared prompts, models or tables differ (the module docstring); else the notes on
    what could not be checked."""
    notes = []
    if a.hashes is not None and b.hashes is not None:
        mine = {prompt_key(prompt, by_id): digest for prompt, digest in a.hashes.items()}
        for prompt, digest in b.hashes.items():
            other = mine.get(prompt_key(prompt, by_id))
            if other is not None and other != digest:
                raise DataError(
                    f"{a.csv} and {b.csv} hold different prompts under id {prompt[1]} (prompt_hash {other} vs "
                    f"{digest}): they are runs of different oracle tables; compare two runs of one table"
                )
    if a.model_fingerprint and b.model_fingerprint and a.model_fingerprint != b.model_fingerprint:
        raise DataError(
            f"{a.csv} and {b.csv} are runs of different models ({a.model}, {a.model_fingerprint[:19]}...; "
            f"{b.model}, {b.model_fingerprint[:19]}...); compare two runs of one model"
        )
    if not (a.model_fingerprint and b.model_fingerprint):
        notes.append("the models are not checked (a run has no JSON with a model fingerprint beside its CSV)")
    tables_differ = a.table_fingerprint and b.table_fingerprint and a.table_fingerprint != b.table_fingerprint
    hashed = a.hashes is not None and b.hashes is not None
    if tables_differ and not hashed:
        bare = a.csv if a.hashes is None else b.csv
        raise DataError(
            f"{a.csv} and {b.csv} are runs of different oracle tables ({a.table}, {b.table}) and {bare} has no "
            "prompt_hash column to show that their prompts are the same; compare two runs of one table"
        )
    if tables_differ:
        notes.append(f"the oracle tables are different files ({a.table}, {b.table}) holding the same shared prompts")
    if not hashed and not (a.table_fingerprint and b.table_fingerprint):
        notes.append(
            "the prompts are not checked (a CSV has no prompt_hash column and a run no JSON with its table's "
            "fingerprint beside it)"
        )
    return notes
