"""Read a wandb run folder (``read_wandb_run``): its metrics, config and completeness, from the run file
(``run-<id>.wandb``, read without the wandb service) or its text files (history, summary, config).

The file is a LevelDB-style log: a 7-byte header (``:W&B``, magic, version), then 32 KiB blocks
of chunks ``crc32 (4) | length (2) | type (1) | data``; chunk types FULL=1, FIRST=2, MIDDLE=3,
LAST=4 reassemble into serialized ``wandb_internal_pb2.Record`` messages (needs ``wandb``).
"""

from __future__ import annotations

import glob
import json
import math
import os
import struct
import warnings

from grpo_mse.errors import DataError
from grpo_mse.training.run_identity import UNRECORDED, RunRecord, from_config, status_of_exit

BLOCK_SIZE = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")
FILE_HEADER = struct.Struct("<4sHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
EXIT_SUMMARY = "run/exit_code"  # trl_train's summary of how the run ended (0: completed)
RUN_METADATA = "run/"  # summary keys about the run itself, never metrics


def iter_chunks(data: bytes, damage: list | None = None):
    """Yield the reassembled record payloads of a ``.wandb`` byte string; a chunk cut short by the end of the file
    (a truncated or still-written run) is appended to ``damage`` when given, not yielded."""
    ident, _, _ = FILE_HEADER.unpack_from(data, 0)
    if ident != b":W&B":
        raise ValueError("not a wandb run file")
    pos, pending = FILE_HEADER.size, b""
    while pos + CHUNK_HEADER.size <= len(data):
        left = BLOCK_SIZE - pos % BLOCK_SIZE
        if left < CHUNK_HEADER.size:  # block trailer padding
            pos += left
            continue
        _, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        pos += CHUNK_HEADER.size
        if kind == 0 and length == 0:  # zero padding up to the next block
            pos += BLOCK_SIZE - pos % BLOCK_SIZE if pos % BLOCK_SIZE else 0
            continue
        payload, pos = data[pos : pos + length], pos + length
        if len(payload) < length:
            if damage is not None:
                damage.append(pos - length)
            return
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            yield pending + payload
            pending = b""
    if pending and damage is not None:  # a record begun but never finished
        damage.append(len(data))


def _item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


def _number(value_json: str):
    try:
        value = json.loads(value_json)
    except ValueError:
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_wandb_file(path: str) -> dict:
    """``{"name", "config", "history": [(step, metric, value)], "summary": {metric: value}, "exit_code": int | None,
    "truncated": bool}`` of a run file (``exit_code``: of wandb's exit record, None when the file has none)."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    run = {"name": None, "config": {}, "history": [], "summary": {}, "exit_code": None, "truncated": False}
    damage: list = []
    for payload in iter_chunks(data, damage):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except Exception:  # a damaged record of a crashed run
            run["truncated"] = True
            continue
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["name"] = record.run.display_name or run["name"]
            for item in record.run.config.update:
                try:
                    run["config"][_item_key(item)] = json.loads(item.value_json)
                except ValueError:
                    pass
        elif kind == "history":
            step = record.history.step.num
            for item in record.history.item:
                key, value = _item_key(item), _number(item.value_json)
                if value is not None and not key.startswith("_"):
                    run["history"].append((int(step), key, value))
        elif kind == "exit":
            run["exit_code"] = int(record.exit.exit_code)
        elif kind == "summary":
            for item in record.summary.update:
                value = _number(item.value_json)
                if value is not None:
                    run["summary"][_item_key(item)] = value
    run["truncated"] = run["truncated"] or bool(damage)
    return run


def _whole_step(raw, source: str) -> int:
    """A wandb ``_step`` as int (a DataError naming ``source`` otherwise)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw != int(raw):
        raise DataError(f"{source}: _step {raw!r} is not a whole number; the file is damaged")
    return int(raw)


def _history_jsonl(path: str) -> list:
    """Records of a wandb history file; an unreadable (e.g. torn) line is skipped with a warning."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            try:
                row = json.loads(line) if line.strip() else {}
            except ValueError:
                row = None
            if not isinstance(row, dict):
                warnings.warn(f"{path}: skipping unreadable line {number}", stacklevel=2)
                continue
            if "_step" not in row:
                continue
            step = _whole_step(row["_step"], f"{path} line {number}")
            for key, raw in row.items():
                value = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
                if value is not None and not key.startswith("_"):
                    records.append((step, key, float(value)))
    return records


def _run_file(run_dir: str, name: str) -> str | None:
    """``run_dir/files/name`` or (older wandb) ``run_dir/name`` if either exists."""
    for path in (os.path.join(run_dir, "files", name), os.path.join(run_dir, name)):
        if os.path.exists(path):
            return path
    return None


def read_wandb_run(run_dir: str) -> RunRecord:
    """The RunRecord of one wandb run folder (``run-*`` or ``offline-run-*``)."""
    name, config, records, summary = os.path.basename(run_dir), {}, [], {}
    exit_code, truncated = None, False
    binaries = sorted(glob.glob(os.path.join(run_dir, "*.wandb")))
    if binaries:
        try:
            run = read_wandb_file(binaries[0])
            name, config, records, summary = run["name"] or name, run["config"], run["history"], run["summary"]
            exit_code, truncated = run["exit_code"], run["truncated"]
        except ImportError as exc:  # no wandb here: the folder's text files only, completeness unrecorded
            warnings.warn(f"cannot read {binaries[0]}: {exc}", stacklevel=2)
        except (ValueError, OSError) as exc:
            warnings.warn(f"cannot read {binaries[0]}: {exc}", stacklevel=2)
            truncated = True
    history, summary_path, config_path = (
        _run_file(run_dir, f) for f in ("wandb-history.jsonl", "wandb-summary.json", "config.yaml")
    )
    if history:
        records = _history_jsonl(history)
    if summary_path:
        try:
            with open(summary_path, encoding="utf-8") as f:
                summary = json.load(f)
        except (ValueError, UnicodeDecodeError) as error:
            raise DataError(
                f"{summary_path}: not readable JSON ({str(error).splitlines()[0]}); the run's "
                "summary is torn: remove the file to collect its history only"
            ) from None
        if not isinstance(summary, dict):
            raise DataError(
                f"{summary_path}: a JSON {type(summary).__name__}, not an object of metrics; "
                "remove the file to collect its history only"
            )
    if not config and config_path:
        import yaml

        try:
            with open(config_path, encoding="utf-8") as f:
                config = yaml.safe_load(f) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise DataError(
                f"{config_path}: not readable YAML ({str(error).splitlines()[0]}); fix or remove "
                "it (the run's K and seed are read from it)"
            ) from None
        if not isinstance(config, dict):
            raise DataError(f"{config_path}: a YAML {type(config).__name__}, not a mapping; fix or remove it")
    if summary.get("_step") is not None:
        step = _whole_step(summary["_step"], summary_path or run_dir)
        seen = {(s, m) for s, m, _ in records}
        latest = {m: v for _, m, v in sorted(records, key=lambda r: r[0])}  # each metric's last logged value
        for key, raw in summary.items():
            # wandb's summary holds each metric's LAST value at the run's current _step: a value equal to the
            # history's last one is that old value (e.g. a validation of an earlier step), not one of this step
            if (
                isinstance(raw, (int, float))
                and not isinstance(raw, bool)
                and not key.startswith("_")
                and (step, key) not in seen
                and latest.get(key) != float(raw)
            ):
                records.append((step, key, float(raw)))
    identity, planned = from_config(config)
    recorded_exit = summary.get(EXIT_SUMMARY)
    code = (
        exit_code
        if exit_code is not None
        else (int(recorded_exit) if isinstance(recorded_exit, (int, float)) else None)
    )
    if code is not None:
        status = status_of_exit(code)
    else:
        status = "truncated" if truncated else ("interrupted" if binaries else UNRECORDED)
    records = [r for r in records if not r[1].startswith(RUN_METADATA)]
    return RunRecord(run_dir, name, identity, planned, status, records)
