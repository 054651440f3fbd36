"""Write the built-in arithmetic datasets (Section 5.1): zero-shot and few-shot JSONL, 500 rows each."""

from __future__ import annotations

import argparse
import json
import os

from grpo_mse.builtin.arithmetic import STYLES, make_rows
from grpo_mse.tables.outputs import write_atomic


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out_dir", default="data")
    p.add_argument("--n", type=int, default=500, help="rows per dataset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--styles", nargs="+", default=list(STYLES), choices=STYLES)
    args = p.parse_args(argv)
    for style in args.styles:
        rows = make_rows(args.n, args.seed, style)
        path = os.path.join(args.out_dir, f"arithmetic_{style}.jsonl")
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
