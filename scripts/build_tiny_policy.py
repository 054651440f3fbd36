"""Build the tiny built-in policy (tokenizer + Qwen2 model) and print a quick V(x) summary.

Example:
    python scripts/build_tiny_policy.py --out_dir assets/tiny_policy --seed 0
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

# Idle OpenMP threads sleep instead of spinning: on a busy 2-core machine spinning made steps ~10x slower.
# Numerics do not depend on it (they do depend on --threads: the default 1 reproduces assets/tiny_policy).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from grpo_mse import cli
from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.flags import Flags, option
from studies.builders.defaults import TINY_STEPS as DEFAULT_STEPS
from studies.command_line import protect_tracked


@dataclass(kw_only=True)
class TinyPolicyConfig(Flags):
    """Where the tiny policy goes, how it is trained, and the V summary printed after."""

    out_dir: str = option("assets/tiny_policy", help="output folder (files inside replaced)")
    overwrite: bool = option(False, help="replace files tracked by git (the shipped assets/tiny_policy) in --out_dir")
    seed: int = option(0, help="training seed")
    steps: int = option(DEFAULT_STEPS, minimum=1, help="training steps")
    lr: float | None = option(None, above=0, help="AdamW peak learning rate (default: built-in)")
    batch_size: int | None = option(None, minimum=1, help="training batch size (default: built-in)")
    n_train_rows: int | None = option(None, minimum=1, help="training rows (default: built-in)")
    threads: int = option(
        1,
        minimum=1,
        help="torch threads; the weights depend (slightly) on it, and 1 reproduces the shipped checkpoint bit for bit",
    )
    eval_prompts: int = option(50, minimum=0, help="0 skips the V summary")
    eval_samples: int = option(32, minimum=1, help="samples per prompt of the V summary")


def main(argv=None) -> None:
    args = TinyPolicyConfig.from_argv(argv, description=__doc__)
    cli.writable_dir(args.out_dir, "--out_dir")
    protect_tracked(args.out_dir, args.overwrite, "--out_dir")
    import torch  # after the flags are checked

    from studies.builders.tiny_policy import build_and_save, estimate_v, v_summary

    if args.threads:
        torch.set_num_threads(args.threads)
    extra = {k: getattr(args, k) for k in ("lr", "batch_size", "n_train_rows") if getattr(args, k) is not None}
    start = time.time()
    model, tokenizer = build_and_save(args.out_dir, seed=args.seed, steps=args.steps, **extra)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"built {args.out_dir}: vocab {len(tokenizer)}, {n_params:,} params, {time.time() - start:.1f}s")
    for path in sorted(Path(args.out_dir).iterdir()):
        print(f"  {path.name:28s} {path.stat().st_size / 1024:8.1f} KiB")

    if args.eval_prompts > 0:
        for style in ("zero_shot", "few_shot"):
            start = time.time()
            rows = make_rows(args.eval_prompts, seed=0, style=style)
            values, eos_rate = estimate_v(model, tokenizer, rows, n_samples=args.eval_samples, seed=args.seed)
            print(
                f"V {style:9s} ({args.eval_prompts} prompts x {args.eval_samples} samples, "
                f"{time.time() - start:.1f}s, EOS rate {eos_rate:.2f}): {v_summary(values)}"
            )


if __name__ == "__main__":
    cli.run(main)
