"""Read metrics from a wandb run file (``run-<id>.wandb``) without the wandb service.

The file is a LevelDB-style log: a 7-byte header (``:W&B``, magic, version), then 32 KiB blocks
of chunks ``crc32 (4) | length (2) | type (1) | data``; chunk types FULL=1, FIRST=2, MIDDLE=3,
LAST=4 reassemble into serialized ``wandb_internal_pb2.Record`` messages (needs ``wandb``).
"""

from __future__ import annotations

import json
import struct

BLOCK_SIZE = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")
FILE_HEADER = struct.Struct("<4sHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


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
