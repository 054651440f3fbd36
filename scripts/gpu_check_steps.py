"""Small steps of scripts/gpu_check.sh that need Python: the installed versions, and the advisor's summary.

python scripts/gpu_check_steps.py versions OUT.json    # every package one by one; a missing one is recorded
python scripts/gpu_check_steps.py installed NAME...    # exit 0 when every module imports (the step's guard)
python scripts/gpu_check_steps.py advisor RUN.json OUT.json   # a tracecov run's advisor: constants, K*, advice
"""

import importlib.metadata
import importlib.util
import json
import os
import platform
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import InputError
from grpo_mse.flags import Flags, option, parse_command

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


def advisor(run_path: str) -> dict:
    """The group-size advisor of a tracecov run: pooled constants, their intervals and the recommendation."""
    try:
        with open(run_path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{run_path}: not a readable tracecov JSON ({error})") from None
    found = result.get("group_size_advisor") if isinstance(result, dict) else None
    if not found:
        raise InputError(f"{run_path} has no group_size_advisor")
    keep = ("pooled", "ci95", "recommendation", "K_best_frequency", "degenerate_replicates", "budget", "allowed_K")
    return {"run": run_path, "n_prompts": result.get("n_prompts"), **{k: found.get(k) for k in keep}}


def write(path: str, record: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


@dataclass(kw_only=True)
class VersionsConfig(Flags):
    """every package's version, one by one (a missing one is recorded), as JSON"""

    out: str = option(positional=True, metavar="OUT.json", help="where the versions go")


@dataclass(kw_only=True)
class InstalledConfig(Flags):
    """exit 0 when every module can be found, else exit 1 (the step's guard)"""

    names: list[str] = option(positional=True, metavar="NAME", help="module names")


@dataclass(kw_only=True)
class AdvisorConfig(Flags):
    """a tracecov run's advisor: constants, K*, advice"""

    run: str = option(positional=True, metavar="RUN.json", help="a run_tracecov result")
    out: str = option(positional=True, metavar="OUT.json", help="where the advisor's summary goes")


COMMANDS = {"versions": VersionsConfig, "installed": InstalledConfig, "advisor": AdvisorConfig}


def main(argv: list[str] | None = None) -> int:
    command, args = parse_command(COMMANDS, argv, description=__doc__)
    if command == "installed":
        return 0 if all(module_found(name) for name in args.names) else 1
    if command == "versions":
        record = versions()
        write(args.out, record)
        print(json.dumps(record))
        return 0
    record = advisor(args.run)
    write(args.out, record)
    print(json.dumps(record.get("recommendation")))
    return 0


if __name__ == "__main__":
    cli.run(main)
