"""Result files: atomic JSON/CSV writes, append-only progress logs for resuming, CIs across prompts."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import tempfile
import time

Z95 = 1.959963984540054


def timestamp() -> str:
    return time.strftime("%Y%m%d_%H%M%S")


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to a temporary file in the same folder, then rename it over ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=os.path.basename(path))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp creates 0600; give the file normal permissions
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def finite(data):
    """``data`` with every NaN or infinite float replaced by None (JSON ``null``, never a ``NaN`` literal)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(value) for value in data]
    return data


def to_json(data, **kwargs) -> str:
    """Strict JSON text of ``data`` (non-finite floats as null)."""
    return json.dumps(finite(data), ensure_ascii=False, allow_nan=False, **kwargs)


def write_json(path: str, data) -> None:
    write_atomic(path, to_json(data, indent=2) + "\n")


def write_csv(path: str, rows: list[dict], columns: list[str]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue())


def append_jsonl(path: str, record: dict) -> None:
    """Append one JSON line and fsync it, so a crash loses at most the line being written."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(to_json(record) + "\n")
        out.flush()
        os.fsync(out.fileno())


def read_complete_jsonl(path: str) -> list[dict]:
    """Records of an append-only log. A torn last line (no newline: a crash mid-write) is cut from the
    file with a note; any other unreadable line is a DataError naming it (nothing is changed)."""
    from grpo_mse.tables.inputs import DataError

    if not os.path.exists(path):
        return []
    records, good_bytes = [], 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.endswith(b"\n"):
                break
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise DataError(f"{path}: line {number} is corrupt; remove or repair it before resuming")
            records.append(record)
            good_bytes += len(raw)
    if good_bytes != os.path.getsize(path):
        print(f"note: {path}: dropping an incomplete last line (interrupted write)", file=sys.stderr)
        with open(path, "r+b") as handle:
            handle.truncate(good_bytes)
    return records


def mean_ci(values: list[float]) -> dict:
    """Mean, sample sd, and 95% half-width 1.96 sd / sqrt(n) of ``values`` (n >= 1)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    half = Z95 * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "sd": sd, "ci95": half, "n": n}


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends: no rounding past p
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high
