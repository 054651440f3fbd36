"""Write the built-in arithmetic datasets (Section 5.1): zero-shot and few-shot JSONL, 500 rows each.

An existing file is only replaced when its content would not change, or with --overwrite.
"""

import json
import os
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.builtin.arithmetic import STYLES, make_rows
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_atomic


@dataclass(kw_only=True)
class ArithmeticDataConfig(Flags):
    """Which built-in datasets to write, how large, and where."""

    out_dir: str = option("data", help="output folder")
    n: int = option(500, minimum=1, help="rows per dataset")
    seed: int = option(0, help="problem seed")
    styles: list[str] = option(list(STYLES), choices=STYLES, help="prompt styles to write")
    overwrite: bool = option(False, help="replace existing files that differ")

    def __post_init__(self) -> None:
        super().__post_init__()  # choices and bounds
        self.styles = cli.unique(self.styles, "--styles")
        cli.writable_dir(self.out_dir, "--out_dir")


def changed(path: str, text: str) -> bool:
    """True when ``path`` exists with other content than ``text``."""
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as handle:
        return handle.read() != text


def main(argv=None) -> None:
    args = ArithmeticDataConfig.from_argv(argv, description=__doc__)
    texts = {}
    for style in args.styles:
        path = os.path.join(args.out_dir, f"arithmetic_{style}.jsonl")
        texts[path] = "".join(json.dumps(r) + "\n" for r in make_rows(args.n, args.seed, style))
        require(
            args.overwrite or not changed(path, texts[path]),
            f"{path} exists with other rows; pass --overwrite to replace it or choose another --out_dir",
        )
    for path, text in texts.items():
        write_atomic(path, text)
        print(f"wrote {text.count(chr(10))} rows to {path}")


if __name__ == "__main__":
    cli.run(main)
