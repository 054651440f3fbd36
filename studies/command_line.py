"""Flag helpers of the studies' command lines (benchmarks, builders, Algorithm 1): a device flag's type, and the
refusal to write over files that git tracks."""

from __future__ import annotations

import os

from grpo_mse import cli
from grpo_mse.errors import UsageError, require


def device_name(text: str) -> str:
    """argparse ``type``: cpu, mps, cuda or cuda:N."""
    try:
        cli.check_device(text)
    except UsageError as error:
        raise cli.BadValue(str(error)) from None
    return text


def tracked_files(path: str) -> list[str]:
    """Files under ``path`` (a file or folder) that git tracks and that exist; [] outside a git checkout."""
    import subprocess

    target = os.path.abspath(os.path.expanduser(path))
    probe = target if os.path.isdir(target) else os.path.dirname(target)
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe)
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", target], cwd=probe, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if listed.returncode != 0:
        return []
    return [name for name in listed.stdout.split("\0") if name and os.path.isfile(os.path.join(probe, name))]


def protect_tracked(path: str, overwrite: bool, flag: str) -> None:
    """UsageError when writing ``path`` would replace files tracked by git, unless ``overwrite``."""
    if overwrite:
        return
    tracked = tracked_files(path)
    shown = ", ".join(tracked[:3]) + (", ..." if len(tracked) > 3 else "")
    require(
        not tracked,
        f"{flag} {path} would replace files tracked by git ({shown}); choose another {flag}, "
        "or pass --overwrite to replace them",
    )
