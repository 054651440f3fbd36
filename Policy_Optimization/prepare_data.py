"""Write VERL train/test parquet files from the built-in arithmetic data or GSM8K/MATH files.

python Policy_Optimization/prepare_data.py --source arithmetic --out_dir data/arithmetic
python Policy_Optimization/prepare_data.py --source gsm8k --train_file a.jsonl --test_file b.jsonl --out_dir d
"""

from __future__ import annotations

import argparse
import os

from grpo_mse import cli
from grpo_mse.builtin.arithmetic import STYLES
from grpo_mse.training.data import SOURCES, arithmetic_splits, check_data_source, file_splits, write_parquet


def parse_args(argv=None) -> argparse.Namespace:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--source", choices=SOURCES, default="arithmetic")
    p.add_argument("--out_dir", required=True, help="writes train.parquet and test.parquet here")
    p.add_argument("--style", choices=STYLES, default="zero_shot", help="arithmetic prompt style")
    p.add_argument("--n_train", type=cli.integer(minimum=1), default=4096, help="arithmetic training problems")
    p.add_argument("--n_test", type=cli.integer(minimum=1), default=500, help="arithmetic test problems")
    p.add_argument("--seed", type=int, default=0, help="arithmetic test seed (train uses seed+1)")
    p.add_argument("--train_file", help="GSM8K/MATH training file (.jsonl, .json or .parquet)")
    p.add_argument("--test_file", help="GSM8K/MATH test file (.jsonl, .json or .parquet)")
    p.add_argument("--limit", type=cli.integer(minimum=1), default=None, help="keep only the first N records per file")
    p.add_argument("--data_source", default=None, help="override the data_source name (GSM8K/MATH)")
    args = p.parse_args(argv)
    if args.source != "arithmetic" and not (args.train_file and args.test_file):
        p.error(f"--source {args.source} needs --train_file and --test_file")
    if args.data_source:
        cli.require(args.source != "arithmetic", "--data_source is for GSM8K/MATH files only")
        check_data_source(args.source, args.data_source)
    cli.writable_dir(args.out_dir, "--out_dir")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.source == "arithmetic":
        splits = arithmetic_splits(args.n_train, args.n_test, args.seed, args.style)
    else:
        splits = file_splits(args.source, args.train_file, args.test_file, args.limit, args.data_source)
    paths = {}  # every split is converted (and checked) before the first file is written
    for split, rows in splits.items():
        paths[split] = write_parquet(rows, os.path.join(args.out_dir, f"{split}.parquet"))
        print(f"{split}: {len(rows)} rows -> {paths[split]}")
    return paths


if __name__ == "__main__":
    cli.run(main)
