"""Hide top-level modules from this Python: ``GPU_CHECK_HIDE="vllm verl"`` makes ``import vllm`` raise
ModuleNotFoundError and ``importlib.util.find_spec("vllm")`` report it missing, as on a machine without it.

Only scripts/gpu_check.sh puts this folder on PYTHONPATH (when GPU_CHECK_HIDE is set), so that its tests can
run the "skipped: not installed" path on a machine that has those packages.
"""

import os
import sys

HIDDEN = frozenset(os.environ.get("GPU_CHECK_HIDE", "").replace(",", " ").split())


class HiddenModules:
    """A meta path finder that refuses the hidden top-level names (and their submodules)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by GPU_CHECK_HIDE)", name=name)
        return None


if HIDDEN:
    sys.meta_path.insert(0, HiddenModules())
