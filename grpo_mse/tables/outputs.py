"""Result files: atomic JSON/CSV writes, append-only progress logs for resuming, CIs across prompts and seeds."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

from grpo_mse.errors import DataError, UsageError, require

Z95 = 1.959963984540054
# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30 (normal beyond).
T975 = (
    12.7062,
    4.3027,
    3.1824,
    2.7764,
    2.5706,
    2.4469,
    2.3646,
    2.306,
    2.2622,
    2.2281,
    2.201,
    2.1788,
    2.1604,
    2.1448,
    2.1314,
    2.1199,
    2.1098,
    2.1009,
    2.093,
    2.086,
    2.0796,
    2.0739,
    2.0687,
    2.0639,
    2.0595,
    2.0555,
    2.0518,
    2.0484,
    2.0452,
    2.0423,
)


def timestamp() -> str:
    return time.strftime("%Y%m%d_%H%M%S")


def write_atomic(path: str, text: str | bytes) -> None:
    """Write ``text`` (UTF-8 text or bytes) to a temporary file in the same folder, then rename it over ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=os.path.basename(path))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp creates 0600; give the file normal permissions
    try:
        with os.fdopen(handle, "wb") if isinstance(text, bytes) else os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        if isinstance(error, OSError) and error.filename is None:  # a full disk names no file: name it
            raise OSError(error.errno, error.strerror, path) from None
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


def read_json(path: str, keys: tuple[str, ...], what: str) -> dict:
    """The JSON object at ``path``; FileNotFoundError if missing, UsageError when it is cut short (not JSON),
    not an object, or lacks any of ``keys``."""
    require(not os.path.isdir(path), f"{path} is a folder; give the {what} JSON file in it")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} JSON not found: {path}")
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: not valid JSON ({getattr(error, 'msg', error)}); is it complete?") from None
    missing = [key for key in keys if not isinstance(loaded, dict) or key not in loaded]
    require(not missing, f"{path}: not a {what} JSON (no {', '.join(missing)})")
    return loaded


def write_json(path: str, data) -> None:
    write_atomic(path, to_json(data, indent=2) + "\n")


def write_csv(path: str, rows: list[dict], columns: list[str]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue())


def append_jsonl(path: str, record: dict) -> None:
    """Append one JSON line and close the file: a killed process loses at most the line being written.

    No fsync (about 7 ms a line): only a machine crash can lose recent lines, and a torn or missing
    line is dropped by ``read_complete_jsonl`` and recomputed, identically, by a resumed run.
    """
    try:
        with open(path, "a", encoding="utf-8") as out:
            out.write(to_json(record) + "\n")
    except OSError as error:  # a full disk names no file: name it (a torn line is cut on --resume)
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, path) from None


def read_complete_jsonl(path: str) -> list[dict]:
    """Records of an append-only log. A torn last line (no newline: a crash mid-write) is cut from the
    file with a note; any other unreadable line is a DataError naming it (nothing is changed)."""
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
    values = [math.nan if v is None else v for v in values]  # null in a log (a non-finite value): nan, not a crash
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    half = Z95 * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "sd": sd, "ci95": half, "n": n}


def t975(df: int) -> float:
    """97.5% quantile of Student's t with ``df`` degrees of freedom (table to 30, then z + (z^3 + z) / (4 df))."""
    return T975[df - 1] if df <= len(T975) else Z95 + (Z95**3 + Z95) / (4 * df)


ACCURACY = re.compile(r"/acc(uracy)?/")  # a metric whose values are shares in [0, 1] (intervals clipped to them)


def mean_t_interval(values) -> tuple[float, float]:
    """(mean, 95% Student-t half-width t_{0.975, n-1} sd / sqrt(n)) of a few values (half-width 0 for one value)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    mean = sum(xs) / n
    if n == 1:
        return mean, 0.0
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, t975(n - 1) * sd / math.sqrt(n)


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


def code_version() -> dict:
    """The code a result was made with: the git commit of this package's checkout and whether tracked files differ
    from it (``dirty``), or the package version outside a git checkout (commit None). A resumed run records the code
    that wrote its files; scripts/same_outputs.sh checks that a change of code leaves a run's numbers unchanged."""
    from importlib.metadata import PackageNotFoundError, version

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the grpo_mse package
    try:
        version_ = version("grpo-mse")
    except PackageNotFoundError:
        version_ = None

    def git(*args) -> str | None:
        try:
            done = subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")  # this package's own checkout, not a repository it is installed in
    same = top is not None and os.path.samefile(top, os.path.dirname(here))
    commit = git("rev-parse", "HEAD") if same else None
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    return {"commit": commit, "dirty": dirty, "version": version_}
