"""Command-line helpers shared by every entry point: one-line errors (exit 2), flag checks, progress bars."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys

DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


class InputError(ValueError):
    """Input that cannot work (a flag, a data file, a model); the message is one line."""


class UsageError(InputError):
    """A flag value that cannot work; the message is one line."""


def require(condition: bool, message: str) -> None:
    """Raise UsageError(message) unless ``condition``."""
    if not condition:
        raise UsageError(message)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keep the description's line breaks and show every flag's default."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line ``error: ...`` (exit 2) and every flag's default in ``--help``."""

    def __init__(self, *args, **kwargs):
        kwargs["formatter_class"] = HelpFormatter
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and not action.help and not any(
                action.default is unset for unset in (None, False, argparse.SUPPRESS)):
            action.help = "default: %(default)s"  # flags without help text still show their default
        return action

    def error(self, message: str):
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def check_range(flag: str, value, minimum=None, maximum=None, above=None) -> None:
    """UsageError unless ``value`` is finite, >= minimum, <= maximum and > above (each when given)."""
    bounds = [f"{sign} {bound}" for sign, bound in ((">=", minimum), (">", above), ("<=", maximum))
              if bound is not None]
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    ok = ok and (above is None or value > above)
    require(ok, f"{flag} must be {' and '.join(bounds) or 'a finite number'} (got {value})")


def _typed(parse, kind: str, **bounds):
    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        try:
            check_range("value", value, **bounds)
        except UsageError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix("value ")) from None
        return value
    convert.__name__ = kind
    return convert


def integer(minimum=None, maximum=None):
    """argparse ``type``: an integer within the bounds."""
    return _typed(int, "an integer", minimum=minimum, maximum=maximum)


def number(minimum=None, maximum=None, above=None):
    """argparse ``type``: a finite float within the bounds (``above``: strictly greater)."""
    return _typed(float, "a number", minimum=minimum, maximum=maximum, above=above)


def check_device(device: str) -> None:
    """UsageError unless ``device`` is cpu, mps, cuda or cuda:N."""
    require(bool(DEVICE.match(device)), f"unknown device {device!r} (use cpu, cuda, cuda:N or mps)")


def device_name(text: str) -> str:
    """argparse ``type``: cpu, mps, cuda or cuda:N."""
    try:
        check_device(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def check_model_path(name: str) -> bool:
    """True when ``name`` is a local model folder; UsageError when it names a local path that is not one.

    A name is local when it exists or starts with ``.``, ``/`` or ``~``, or has more than one ``/``
    (a hub id is ``org/name``); cheap (no torch), so commands call it before reading data."""
    path = os.path.expanduser(name)
    local = os.path.exists(path) or name.startswith((".", "/", "~")) or name.rstrip("/").count("/") > 1
    if local and not os.path.isdir(path):
        raise UsageError(f"model folder not found: {name}" if not os.path.exists(path)
                         else f"--model {name} is a file; give the model's folder")
    require(not local or os.path.isfile(os.path.join(path, "config.json")),
            f"{name} is not a model folder (no config.json)")
    return local


def unique(values: list, flag: str) -> list:
    """``values`` without repeats (first occurrence kept), with a note on stderr when any were dropped."""
    kept = list(dict.fromkeys(values))
    if len(kept) < len(values):
        print(f"note: {flag} lists a value twice; using {' '.join(map(str, kept))}", file=sys.stderr)
    return kept


def writable_dir(path: str, flag: str) -> None:
    """UsageError unless ``path`` is (or can be created as) a writable folder; creates nothing."""
    target = os.path.abspath(os.path.expanduser(path))
    probe = target
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    require(os.path.isdir(probe), f"{flag} {path}: {probe} is a file, not a folder")
    require(os.access(probe, os.W_OK | os.X_OK), f"{flag} {path}: folder {probe} is not writable")


def writable_file(path: str, flag: str) -> None:
    """UsageError unless ``path`` can be written as a file (its folder checked as by writable_dir)."""
    target = os.path.abspath(os.path.expanduser(path))
    require(not os.path.isdir(target), f"{flag} {path} is a folder, not a file")
    require(not os.path.exists(target) or os.access(target, os.W_OK), f"{flag} {path} is not writable")
    writable_dir(os.path.dirname(target), flag)


def progress(items=None, **kwargs):
    """A tqdm bar on stderr (quiet when not a terminal only if the caller disables it)."""
    from tqdm.auto import tqdm

    return tqdm(items, dynamic_ncols=True, **kwargs)


def add_model_flags(parser, model: str | None, device: str, dtype: str,
                    model_help: str = "hub id or local folder") -> None:
    """--model (required when ``model`` is None), --revision, --device, --dtype, --trust_remote_code."""
    parser.add_argument("--model", default=model, required=model is None, help=model_help)
    parser.add_argument("--revision", default="main", help="hub revision (branch, tag or commit) of --model")
    parser.add_argument("--device", default=device, type=device_name, help="cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default=dtype, choices=["fp16", "bf16", "fp32"], help="model weights' dtype")
    parser.add_argument("--trust_remote_code", action="store_true", help="allow the model's own code (off by default)")


# vLLM's SamplingParams raise above 2 and silently clamp 0 < T < 0.01 up to 0.01 (vllm/sampling_params.py).
VLLM_TEMPERATURE = (0.01, 2.0)


def check_backend(backend: str, device: str, gpu_util: float, temperature: float = 1.0,
                  max_model_len: int | None = None) -> None:
    """Refuse what vLLM would reject or silently change, before any model or vLLM import: no CUDA, a device
    other than the first visible GPU, a temperature outside vLLM's range, a memory share outside (0, 1], and
    vLLM under torchrun (one GPU per rank)."""
    if backend != "vllm":
        return
    require(device.startswith("cuda"), "--backend vllm needs --device cuda")
    index = device.partition(":")[2]
    require(index in ("", "0"), f"--backend vllm samples on the first visible GPU, so --device {device} would split "
                                f"vLLM and the model over two GPUs; run CUDA_VISIBLE_DEVICES={index} ... --device cuda")
    low, high = VLLM_TEMPERATURE
    require(low <= temperature <= high,
            f"--backend vllm needs {low} <= --temperature <= {high:g} (vLLM raises above {high:g} and silently "
            f"clamps below {low} up to {low}); got {temperature:g}: use --backend hf")
    check_range("--vllm_gpu_util", gpu_util, above=0, maximum=1)
    if max_model_len is not None:
        check_range("--vllm_max_model_len", max_model_len, minimum=1)
    require(int(os.environ.get("WORLD_SIZE", "1")) == 1,
            "--backend vllm runs one engine on the first visible GPU and cannot be sharded with torchrun; "
            "run one process per GPU (CUDA_VISIBLE_DEVICES=N) or use --backend hf")


def make_vllm(config, device: str):
    """A VLLMSampler when ``config.backend`` is vllm, else None (``config``: a ModelConfig)."""
    if config.backend != "vllm":
        return None
    check_backend(config.backend, device, config.vllm_gpu_util, config.temperature, config.vllm_max_model_len)
    from grpo_mse.policy.vllm_sampler import VLLMSampler

    return VLLMSampler(config.model, config.dtype, config.seed, config.vllm_gpu_util, config.trust_remote_code,
                       config.revision, max_model_len=config.vllm_max_model_len,
                       enforce_eager=config.vllm_enforce_eager)


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    if isinstance(error, OSError) and error.filename is not None:
        text = f"{error.strerror or type(error).__name__}: {error.filename}"
    return text.splitlines()[0] if text else type(error).__name__


def run(main, resume_hint: str | None = None) -> None:
    """Call ``main()``: an input error becomes one ``error: ...`` line and exit 2, Ctrl-C one line and exit 130.

    ``resume_hint`` is added to the Ctrl-C line (how to continue the interrupted work). A returned
    integer is the exit status.
    """
    try:
        status = main()
    except KeyboardInterrupt:
        print("error: interrupted" + (f"; {resume_hint}" if resume_hint else ""), file=sys.stderr)
        sys.exit(130)
    except (InputError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as error:
        print(f"error: {_one_line(error)}", file=sys.stderr)
        sys.exit(2)
    except MemoryError as error:
        print(f"error: out of memory: {_one_line(error)}", file=sys.stderr)
        sys.exit(1)
    except RuntimeError as error:
        if type(error).__name__ != "OutOfMemoryError":  # torch.OutOfMemoryError, without importing torch here
            raise
        print(f"error: {_one_line(error)}", file=sys.stderr)
        sys.exit(1)
    if isinstance(status, int) and not isinstance(status, bool):
        sys.exit(status)
