"""Write VERL train/test parquet files from the built-in arithmetic data or GSM8K/MATH files.

python Policy_Optimization/prepare_data.py --source arithmetic --out_dir data/arithmetic
python Policy_Optimization/prepare_data.py --source gsm8k --train_file a.jsonl --test_file b.jsonl --out_dir d
"""

from __future__ import annotations

import argparse
import os

from grpo_mse.builtin.arithmetic import STYLES
from grpo_mse.training.data import SOURCES, arithmetic_splits, file_splits, write_parquet


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", choices=SOURCES, default="arithmetic")
    p.add_argument("--out_dir", required=True, help="writes train.parquet and test.parquet here")
    p.add_argument("--style", choices=STYLES, default="zero_shot", help="arithmetic prompt style")
    p.add_argument("--n_train", type=int, default=4096, help="arithmetic training problems")
    p.add_argument("--n_test", type=int, default=500, help="arithmetic test problems")
    p.add_argument("--seed", type=int, default=0, help="arithmetic test seed (train uses seed+1)")
    p.add_argument("--train_file", help="GSM8K/MATH training file (.jsonl, .json or .parquet)")
    p.add_argument("--test_file", help="GSM8K/MATH test file (.jsonl, .json or .parquet)")
    p.add_argument("--limit", type=int, default=None, help="keep only the first N records per file")
    p.add_argument("--data_source", default=None, help="override the data_source name (GSM8K/MATH)")
    args = p.parse_args(argv)
    if args.source != "arithmetic" and not (args.train_file and args.test_file):
        p.error(f"--source {args.source} needs --train_file and --test_file")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.source == "arithmetic":
        splits = arithmetic_splits(args.n_train, args.n_test, args.seed, args.style)
    else:
        splits = file_splits(args.source, args.train_file, args.test_file, args.limit, args.data_source)
    paths = {}
    for split, rows in splits.items():
        paths[split] = write_parquet(rows, os.path.join(args.out_dir, f"{split}.parquet"))
        print(f"{split}: {len(rows)} rows -> {paths[split]}")
    return paths


if __name__ == "__main__":
    main()
