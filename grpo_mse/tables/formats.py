"""The prompt tables other than JSON lines: a ``.json`` list, a ``.parquet`` file, a saved ``datasets`` folder and
a hub dataset id, read into plain rows, and the one-line refusals of their reading. ``tables/inputs.py`` imports
this module only when such a table is given (or a file is refused), so a run on a JSONL table never loads it.
"""

from __future__ import annotations

import json

from grpo_mse.errors import DataError


def plain(value):
    """Convert numpy/pyarrow containers and scalars from parquet into plain Python objects."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


def not_utf8(path: str, error: UnicodeDecodeError) -> DataError:
    return DataError(
        f"{path}: not UTF-8 text (byte {error.start}: {error.reason}); save it as UTF-8, e.g. iconv -f latin1 -t utf-8"
    )


def not_a_split(split: str, source: str, what: str) -> DataError:
    """--split given for a table that has no splits: refused, or the whole table would be recorded as that split."""
    return DataError(
        f"--split {split} selects a split of a dataset folder or hub id, but {source} {what}; drop --split "
        "(or point at the folder that holds the split)"
    )


def read_parquet(path: str) -> list[dict]:
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as error:  # pyarrow's errors derive from these
        line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(f"{path}: not a readable parquet file ({line}); is it complete?") from None
    return [plain(r) for r in frame.to_dict(orient="records")]


def read_json(path: str) -> list[dict] | None:
    """Rows of a ``.json`` file holding a list (or ``{"data": [...]}``); None when the file is not one JSON
    document (then it is read as JSON lines)."""
    with open(path, encoding="utf-8-sig") as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError:
            return None
        except UnicodeDecodeError as error:
            raise not_utf8(path, error) from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of rows")
    for index, row in enumerate(data):
        if not isinstance(row, dict):
            raise DataError(
                f"{path}: row {index} is {type(row).__name__} {row!r:.40}, not a JSON object; "
                "each row needs prompt and ground_truth fields"
            )
    return data


def read_saved_dataset(path: str, split: str) -> list[dict]:
    """Rows of ``split`` of a folder saved by ``datasets`` (``save_to_disk``)."""
    try:
        import datasets
    except ImportError:  # optional: only saved dataset folders and hub ids need it
        raise DataError(f"{path}: no {split}.jsonl/.parquet inside and `datasets` is not installed") from None
    try:
        loaded = datasets.load_from_disk(path)
    except FileNotFoundError:
        raise DataError(f"{path}: not a saved dataset and has no {split}.jsonl or {split}.parquet") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DataError(f"{path}: split {split!r} not found (have {', '.join(loaded)})")
        loaded = loaded[split]
    elif split != "train":
        raise not_a_split(split, path, "holds one saved Dataset without splits")
    return [plain(r) for r in loaded]


def read_hub(source: str, split: str) -> list[dict]:
    """Rows of ``split`` of the hub dataset ``source`` (the network, through ``datasets``)."""
    import datasets

    try:
        return [plain(r) for r in datasets.load_dataset(source, split=split)]
    except Exception as error:  # network/hub errors are many types
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(f"cannot load dataset {source!r} (split {split!r}): {first}") from None
