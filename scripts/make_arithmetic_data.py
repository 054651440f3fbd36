"""Write the built-in arithmetic datasets (Section 5.1): zero-shot and few-shot JSONL, 500 rows each.

An existing file is only replaced when its content would not change, or with --overwrite.
"""

from __future__ import annotations

import json
import os

from grpo_mse import cli
from grpo_mse.builtin.arithmetic import STYLES, make_rows
from grpo_mse.tables.outputs import write_atomic


def changed(path: str, text: str) -> bool:
    """True when ``path`` exists with other content than ``text``."""
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as handle:
        return handle.read() != text


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--out_dir", default="data", help="output folder")
    p.add_argument("--n", type=cli.integer(minimum=1), default=500, help="rows per dataset")
    p.add_argument("--seed", type=int, default=0, help="problem seed")
    p.add_argument("--styles", nargs="+", default=list(STYLES), choices=STYLES, help="prompt styles to write")
    p.add_argument("--overwrite", action="store_true", help="replace existing files that differ")
    args = p.parse_args(argv)
    cli.writable_dir(args.out_dir, "--out_dir")
    texts = {}
    for style in cli.unique(args.styles, "--styles"):
        path = os.path.join(args.out_dir, f"arithmetic_{style}.jsonl")
        texts[path] = "".join(json.dumps(r) + "\n" for r in make_rows(args.n, args.seed, style))
        cli.require(args.overwrite or not changed(path, texts[path]),
                    f"{path} exists with other rows; pass --overwrite to replace it or choose another --out_dir")
    for path, text in texts.items():
        write_atomic(path, text)
        print(f"wrote {text.count(chr(10))} rows to {path}")


if __name__ == "__main__":
    cli.run(main)
