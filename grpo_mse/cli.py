"""Command-line helpers shared by every entry point: one-line errors (exit 2), flag checks, progress bars."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import os
import re
import sys
import tempfile

from grpo_mse.errors import UsageError, describe, require

DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
# difflib's similarity a flag needs to be suggested: --oracle_v_file -> --oracle_table (0.76), not --out_dir ->
# --no_advisor (0.67)
SUGGESTION_CUTOFF = 0.75


BadValue = argparse.ArgumentTypeError  # raised by a flag's ``type`` converter: its message ends up on the error line


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keep the description's line breaks and show every flag's default."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line ``error: ...`` (exit 2) and every flag's default in ``--help``."""

    def __init__(self, *args, **kwargs):
        kwargs["formatter_class"] = HelpFormatter
        # a flag is taken by its full name only: a prefix (--max_memory for --max_memory_gb) would silently change
        # meaning, or stop parsing, the day a flag sharing it is added; the error names the flag it may have meant
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if (
            action.option_strings
            and not action.help
            and not any(action.default is unset for unset in (None, False, argparse.SUPPRESS))
        ):
            action.help = "default: %(default)s"  # flags without help text still show their default
        return action

    def parse_known_args(self, args=None, namespace=None):
        self._argv = arguments(args)  # kept for ``error``: a mistyped flag is named before the flags it hides
        return super().parse_known_args(self._argv, namespace)

    def error(self, message: str):
        # argparse names missing required flags before unknown ones, so `--oracle_v_file x` was reported as a
        # missing --oracle_table; name the unknown flag first, with the closest real one
        unknown = self.unknown_flags(getattr(self, "_argv", []))
        if unknown and message.startswith("the following arguments are required"):
            message = f"unrecognized arguments: {' '.join(unknown)}"
        if unknown and message.startswith("unrecognized arguments"):
            message += "".join(self.closest_hint(flag) for flag in unknown)
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)

    def unknown_flags(self, argv: list[str]) -> list[str]:
        """The ``--flag`` tokens of ``argv`` this parser does not know, not even as an abbreviation (none for a
        parser with subcommands: its flags depend on the subcommand)."""
        if self._subparsers is not None:
            return []
        known, unknown = self._option_string_actions, []
        for token in argv:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if not name.startswith("--") or " " in token or name in known:
                continue  # a value (a space in it: a quoted flag list), a short flag or a known flag
            if not (self.allow_abbrev and any(option.startswith(name) for option in known)):
                unknown.append(name)
        return unknown

    def closest_hint(self, flag: str) -> str:
        """`` (did you mean --x?)`` for the closest known flag, ignoring case and '-' for '_', or the one flag that
        ``flag`` abbreviates (prefixes are not taken: ``allow_abbrev``); empty when none is close."""
        options = [option for option in self._option_string_actions if option.startswith("--")]
        same = [option for option in options if option.lower().replace("-", "_") == flag.lower().replace("-", "_")]
        longer = [option for option in options if option.startswith(flag)]
        same = same or (longer if len(longer) == 1 else [])
        close = same or difflib.get_close_matches(flag, options, n=1, cutoff=SUGGESTION_CUTOFF)
        return f" (did you mean {close[0]}?)" if close else ""


def arguments(argv: list[str] | None = None) -> list[str]:
    """The command's arguments: ``argv`` when given, else ``sys.argv[1:]`` (the one place outside argparse that
    reads sys.argv)."""
    return list(sys.argv[1:] if argv is None else argv)


@contextlib.contextmanager
def command_line(argv: list[str]):
    """Inside the block, ``sys.argv`` is ``argv`` (for a library's own entry point that reads it); restored after."""
    saved = sys.argv
    sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = saved


def check_range(flag: str, value, minimum=None, maximum=None, above=None) -> None:
    """UsageError unless ``value`` is finite, >= minimum, <= maximum and > above (each when given)."""
    bounds = [
        f"{sign} {bound}" for sign, bound in ((">=", minimum), (">", above), ("<=", maximum)) if bound is not None
    ]
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    ok = ok and (above is None or value > above)
    finite = "a finite number" if not bounds or (isinstance(value, (int, float)) and not math.isfinite(value)) else ""
    require(ok, f"{flag} must be {' '.join(filter(None, [finite, ' and '.join(bounds)]))} (got {value})")


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


def unique(values: list, flag: str) -> list:
    """``values`` without repeats (first occurrence kept), with a note on stderr when any were dropped."""
    kept = list(dict.fromkeys(values))
    if len(kept) < len(values):
        print(f"note: {flag} lists a value twice; using {' '.join(map(str, kept))}", file=sys.stderr)
    return kept


def writable_dir(path: str, flag: str) -> None:
    """UsageError unless ``path`` is (or can be created as) a writable folder; creates nothing."""
    require(bool(str(path).strip()), f"{flag} is empty; give a folder (e.g. {flag} out)")
    target = os.path.abspath(os.path.expanduser(path))
    probe = target
    while not os.path.exists(probe):
        require(
            not os.path.islink(probe),
            f"{flag} {path}: {probe} is a broken symbolic link (its target "
            f"{os.readlink(probe) if os.path.islink(probe) else ''} does not exist); "
            "create the target or choose another folder",
        )
        probe = os.path.dirname(probe)
    require(os.path.isdir(probe), f"{flag} {path}: {probe} is a file, not a folder")
    require(os.access(probe, os.W_OK | os.X_OK), f"{flag} {path}: folder {probe} is not writable")
    try:  # os.access says yes to root on read-only file systems (/proc, a read-only mount): try a file that vanishes
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as error:
        raise UsageError(f"{flag} {path}: cannot write in {probe} ({error.strerror or error})") from None


def writable_file(path: str, flag: str) -> None:
    """UsageError unless ``path`` can be written as a file (its folder checked as by writable_dir)."""
    require(bool(str(path).strip()), f"{flag} is empty; give a file name")
    target = os.path.abspath(os.path.expanduser(path))
    require(not os.path.isdir(target), f"{flag} {path} is a folder, not a file")
    require(not os.path.exists(target) or os.access(target, os.W_OK), f"{flag} {path} is not writable")
    writable_dir(os.path.dirname(target), flag)


def progress(items=None, **kwargs):
    """A tqdm bar on stderr (quiet when not a terminal only if the caller disables it)."""
    from tqdm.auto import tqdm

    return tqdm(items, dynamic_ncols=True, **kwargs)


def launch_env() -> tuple[int, int, int]:
    """(WORLD_SIZE, RANK, LOCAL_RANK) as torchrun sets them; a UsageError (one line) when they are
    malformed or WORLD_SIZE > 1 comes without RANK (the command was not started by torchrun)."""
    values = {}
    for name, default in (("WORLD_SIZE", "1"), ("RANK", None), ("LOCAL_RANK", "0")):
        text = os.environ.get(name, default)
        try:
            values[name] = None if text is None else int(text)
        except ValueError:
            raise UsageError(
                f"environment variable {name}={text!r} is not an integer; unset it or start the command with torchrun"
            ) from None
    world, rank, local = values["WORLD_SIZE"], values["RANK"], values["LOCAL_RANK"]
    if world < 1:
        raise UsageError(f"WORLD_SIZE={world} must be >= 1; unset it or start the command with torchrun")
    if world == 1:
        return 1, 0, 0
    if rank is None or not 0 <= rank < world or local < 0:
        raise UsageError(
            f"WORLD_SIZE={world} with RANK={os.environ.get('RANK')} and LOCAL_RANK={local}: set by "
            "hand? start the command with torchrun --nproc_per_node N, or unset WORLD_SIZE"
        )
    return world, rank, local


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    if isinstance(error, OSError) and error.filename is not None:
        text = f"{error.strerror or type(error).__name__}: {error.filename}"
    return text.splitlines()[0] if text else type(error).__name__


def _close_progress_bars() -> None:
    """Close the open tqdm bars, then start a new line, so that an error line stands on a line of its own."""
    std = sys.modules.get("tqdm.std")
    bars = list(getattr(getattr(std, "tqdm", None), "_instances", None) or ())
    for bar in bars:
        bar.close()
    if bars:
        print(file=sys.stderr)


def run(main, resume_hint: str | None = None) -> None:
    """Call ``main()`` under the error boundary: an input error or an expected library failure on bad input
    (grpo_mse.errors.describe) becomes one ``error: ...`` line and exit 2, Ctrl-C one line and exit 130.

    ``resume_hint`` is added to the Ctrl-C line and to a full disk's line (how to continue the interrupted
    work). A returned integer is the exit status; anything unexpected keeps its traceback.
    """
    try:
        status = main()
    except KeyboardInterrupt:
        _close_progress_bars()
        print("error: interrupted" + (f"; {resume_hint}" if resume_hint else ""), file=sys.stderr)
        sys.exit(130)
    except MemoryError as error:
        print(f"error: out of memory: {_one_line(error)}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # noqa: BLE001 - sorted by describe(); the rest is re-raised
        if type(error).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError, without importing torch here
            print(f"error: {_one_line(error)}", file=sys.stderr)
            sys.exit(1)
        line = describe(error, resume_hint)
        if line is None:
            raise
        _close_progress_bars()
        print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    if isinstance(status, int) and not isinstance(status, bool):
        sys.exit(status)
