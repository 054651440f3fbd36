"""Small steps of scripts/gpu_check.sh that need Python: the installed versions, and the advisor's summary.

python scripts/gpu_check_steps.py versions OUT.json    # every package one by one; a missing one is recorded
python scripts/gpu_check_steps.py installed NAME...    # exit 0 when every module imports (the step's guard)
python scripts/gpu_check_steps.py advisor RUN.json OUT.json   # a tracecov run's advisor: constants, K*, advice
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import sys

# (distribution, module): the gradient-evaluation path, then what only GPU training and vLLM sampling need
PACKAGES = [
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("tokenizers", "tokenizers"),
    ("safetensors", "safetensors"),
    ("numpy", "numpy"),
    ("pandas", "pandas"),
    ("pyarrow", "pyarrow"),
    ("matplotlib", "matplotlib"),
    ("tqdm", "tqdm"),
    ("scipy", "scipy"),
    ("datasets", "datasets"),
    ("vllm", "vllm"),
    ("verl", "verl"),
    ("ray", "ray"),
    ("trl", "trl"),
    ("math-verify", "math_verify"),
    ("wandb", "wandb"),
    ("flash-attn", "flash_attn"),
]


def module_found(module: str) -> bool:
    """True when ``module`` can be found (not imported: vLLM's import alone takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a hidden or broken package
        return False


def package_version(distribution: str, module: str) -> str | None:
    if not module_found(module):
        return None
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (no package metadata)"


def versions() -> dict:
    """Python, every package's version (None: not installed) and, when torch loads, its CUDA build and GPUs."""
    record = {"python": platform.python_version(), "packages": {}}
    for distribution, module in PACKAGES:
        record["packages"][distribution] = package_version(distribution, module)
    try:
        import torch

        record["torch_cuda"] = torch.version.cuda
        record["cuda_available"] = torch.cuda.is_available()
        record["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if record["gpus"]:
            record["gpu_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
    except Exception as error:  # recorded, not fatal: the other steps say what fails
        record["torch_error"] = f"{type(error).__name__}: {error}".splitlines()[0]
    return record


class BadInput(Exception):
    """A bad input file: one line on stderr, exit 2."""


def advisor(run_path: str) -> dict:
    """The group-size advisor of a tracecov run: pooled constants, their intervals and the recommendation."""
    try:
        with open(run_path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadInput(f"{run_path}: not a readable tracecov JSON ({error})") from None
    found = result.get("group_size_advisor") if isinstance(result, dict) else None
    if not found:
        raise BadInput(f"{run_path} has no group_size_advisor")
    keep = ("pooled", "ci95", "recommendation", "K_best_frequency", "degenerate_replicates", "budget", "allowed_K")
    return {"run": run_path, "n_prompts": result.get("n_prompts"), **{k: found.get(k) for k in keep}}


def write(path: str, record: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


USAGE = "usage: gpu_check_steps.py versions OUT.json | installed NAME... | advisor RUN OUT"


def main(argv: list[str]) -> int:
    if argv in (["--help"], ["-h"]):
        print(USAGE + "\n\n" + (__doc__ or "").strip())
        return 0
    if len(argv) >= 2 and argv[0] == "installed":
        return 0 if all(module_found(name) for name in argv[1:]) else 1
    if len(argv) == 2 and argv[0] == "versions":
        record = versions()
        write(argv[1], record)
        print(json.dumps(record))
        return 0
    if len(argv) == 3 and argv[0] == "advisor":
        try:
            record = advisor(argv[1])
        except BadInput as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        write(argv[2], record)
        print(json.dumps(record.get("recommendation")))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
