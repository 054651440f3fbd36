"""Build the training-demo policy (assets/train_policy) from the built-in one and print V(x) and greedy accuracy.

The shipped policy is fine-tuned briefly on zero-shot arithmetic in which a fixed share of the
targets carries a spurious trailing digit ("42 7"); see studies/builders/train_policy.py and
docs/training.md. The summary uses the training demo's held-out prompts (make_rows(n, seed=0)) and
its sampling (temperature 1, top-p 1, 16 new tokens).

Example:
    python scripts/build_train_policy.py --out_dir assets/train_policy --seed 0
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep (numerics unchanged)

from grpo_mse import cli
from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.flags import Flags, option
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.rewards.rules import score
from studies.builders import defaults


@dataclass(kw_only=True)
class TrainPolicyConfig(Flags):
    """How the training-demo policy is built from the built-in one, and how its summary is measured."""

    out_dir: str = option("assets/train_policy", help="output folder (files inside replaced)")
    base_dir: str = option(defaults.TRAIN_BASE, help="policy to start from")
    seed: int = option(0, minimum=0, help="seed of the fine-tuning and of the V summary's samples")
    steps: int = option(defaults.TRAIN_STEPS, minimum=1, help="fine-tuning steps")
    lr: float = option(defaults.TRAIN_LR, above=0, help="AdamW peak learning rate")
    fraction: float = option(defaults.FLAW_FRACTION, minimum=0, maximum=1, help="share of flawed targets")
    threads: int = option(1, minimum=0, help="torch threads (the weights depend slightly on it; 0: torch's choice)")
    eval_prompts: int = option(100, minimum=0, help="held-out prompts of the summary (0 skips it)")
    eval_samples: int = option(16, minimum=1, help="samples per prompt of the V summary")
    max_new_tokens: int = option(16, minimum=1, help="new tokens per sample and per greedy answer")

    def __post_init__(self) -> None:
        super().__post_init__()  # bounds
        check_model_path(self.base_dir)
        cli.writable_dir(self.out_dir, "--out_dir")


def main(argv=None) -> None:
    args = TrainPolicyConfig.from_argv(argv, description=__doc__)
    import torch  # after the flags are parsed

    from grpo_mse.training.trl_backend import greedy_accuracy
    from studies.builders import train_policy as trp
    from studies.builders.tiny_policy import estimate_v, v_summary

    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.time()
    model, tokenizer = trp.build_and_save(
        args.out_dir, base_dir=args.base_dir, seed=args.seed, steps=args.steps, lr=args.lr, fraction=args.fraction
    )
    print(f"built {args.out_dir} from {args.base_dir}: {time.time() - start:.1f}s")
    for path in sorted(Path(args.out_dir).iterdir()):
        print(f"  {path.name:28s} {path.stat().st_size / 1024:8.1f} KiB")
    if args.eval_prompts <= 0:
        return
    rows = make_rows(args.eval_prompts, seed=0, style="zero_shot")
    start = time.time()
    values, eos_rate = estimate_v(
        model,
        tokenizer,
        rows,
        n_samples=args.eval_samples,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        top_p=1.0,
    )
    print(
        f"V zero_shot ({args.eval_prompts} held-out prompts x {args.eval_samples} samples, T=1, top-p 1, "
        f"{time.time() - start:.1f}s, EOS rate {eos_rate:.2f}): {v_summary(values)}"
    )
    val = [{**r, "data_source": "arithmetic_zero_shot"} for r in rows]
    acc = greedy_accuracy(
        model,
        tokenizer,
        val,
        lambda data_source, solution_str, ground_truth: score(data_source, solution_str, ground_truth),
        args.max_new_tokens,
    )
    print(f"greedy accuracy on the same prompts: {next(iter(acc.values())):.3f}")
