"""Command-line helpers shared by the scripts: one-line errors, progress bars."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


class UsageError(ValueError):
    """A flag value that cannot work; the message is one line."""


def require(condition: bool, message: str) -> None:
    """Raise UsageError(message) unless ``condition``."""
    if not condition:
        raise UsageError(message)


def progress(items=None, **kwargs):
    """A tqdm bar on stderr (quiet when not a terminal only if the caller disables it)."""
    return tqdm(items, dynamic_ncols=True, **kwargs)


def run(main) -> None:
    """Call ``main()``; turn expected input errors into one line on stderr and exit status 2."""
    from grpo_mse.data import DataError
    from grpo_mse.modeling import ModelError

    try:
        main()
    except (UsageError, DataError, ModelError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
