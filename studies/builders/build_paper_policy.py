"""Build the paper-regime policy (assets/paper_policy) from the built-in one and print its V(x) summary.

Stage 1 fine-tunes the tiny policy on zero-shot arithmetic whose targets put a fixed-length lead-in of
random words before the correct answer (" the final with each problem in ONLY and: 42"); stage 2 on the same
problems where a problem's share q of targets is correct and the rest end in its slip answer (+-10); stage 3
(optional) continues stage 2 at a learning rate decaying to 0; see
studies/builders/paper_policy.py and docs/paper_regime.md. One thread: ~15 + ~8 + ~9 min on a 2-core CPU.
The fine-tuning problems are the demo's own (the policy is meant to have the paper's range of V on them, not to
generalise). The summary uses the demo's prompts
(data/arithmetic_zero_shot.jsonl = make_rows(n, seed=0)) and its sampling (temperature 1, top-p 0.95).

Example:
    python scripts/build_paper_policy.py --out_dir assets/paper_policy --seed 0
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep (numerics unchanged)

from grpo_mse import cli
from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.policy.model_source import check_model_path
from studies.builders import defaults


@dataclass(kw_only=True)
class PaperPolicyConfig(Flags):
    """How the paper-regime policy is built from the built-in one, and how its summary is measured."""

    out_dir: str = option("assets/paper_policy", help="output folder (files inside replaced)")
    base_dir: str = option(defaults.TRAIN_BASE, help="policy to start from")
    seed: int = option(0, minimum=0, help="seed of the lead-ins, the fine-tuning and the summary's samples")
    steps: int = option(
        defaults.PAPER_STEPS, minimum=0, help="stage 1: fine-tuning steps on correct answers (0: BASE_DIR is stage 1's)"
    )
    slip_steps: int = option(
        defaults.PAPER_SLIP_STEPS, minimum=0, help="stage 2: fine-tuning steps on the slip mixture (0: stage 1 only)"
    )
    settle_steps: int = option(
        defaults.PAPER_SETTLE_STEPS,
        minimum=0,
        help="stage 3: steps on the slip mixture at a cosine-decaying rate (0: none; BASE_DIR with --steps 0 "
        "--slip_steps 0 is then a stage-2 policy)",
    )
    lr: float = option(defaults.PAPER_LR, above=0, help="AdamW peak learning rate")
    threads: int = option(1, minimum=0, help="torch threads (the weights depend slightly on it; 0: torch's choice)")
    eval_prompts: int = option(48, minimum=0, help="demo prompts of the V summary (0 skips it)")
    eval_samples: int = option(16, minimum=1, help="samples per prompt of the V summary")
    eval_every: int = option(0, minimum=0, help="also print the V summary every this many steps (0: at the end only)")
    checkpoints: bool = option(False, help="with --eval_every, also save the policy at each summary to OUT_DIR.stepN")

    def __post_init__(self) -> None:
        super().__post_init__()  # bounds
        require(
            self.steps or self.slip_steps or self.settle_steps,
            "--steps, --slip_steps and --settle_steps are all 0: nothing to build",
        )
        check_model_path(self.base_dir)
        cli.writable_dir(self.out_dir, "--out_dir")


def main(argv=None) -> None:
    args = PaperPolicyConfig.from_argv(argv, description=__doc__)
    import torch  # after the flags are parsed

    from studies.builders import paper_policy as pp
    from studies.builders.tiny_policy import sample_answers, save_policy, share_correct, v_summary

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = make_rows(args.eval_prompts, seed=0, style="zero_shot")

    plan = pp.slip_plan(args.eval_prompts, seed=args.seed)
    slip_targets = [{**row, "ground_truth": slip} for row, (_, slip) in zip(rows, plan)]

    def summary(model, tokenizer, label: str) -> None:
        start = time.time()
        answers, eos_rate = sample_answers(model, tokenizer, rows, n_samples=args.eval_samples, seed=args.seed)
        values = share_correct(rows, answers)
        print(
            f"V {label} ({args.eval_prompts} demo prompts x {args.eval_samples} samples, {time.time() - start:.1f}s, "
            f"EOS rate {eos_rate:.2f}): {v_summary(values)}",
            flush=True,
        )
        if args.slip_steps or args.settle_steps:  # the same samples scored against the slip answers
            slips = share_correct(slip_targets, answers)
            target = [n / pp.COPIES for n, _ in plan]
            on_target = sum(map(sum, zip(values, slips))) / len(values)
            gap = sum(abs(v - q) for v, q in zip(values, target)) / len(values)
            print(
                f"  {label}: slip share {sum(slips) / len(slips):.3f}, correct or slip {on_target:.3f}, "
                f"mean |V - q| {gap:.3f} (q: the problem's share of correct targets)",
                flush=True,
            )

    extra = {}
    if args.eval_every and args.eval_prompts:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.base_dir)

        def callback(step, model):
            summary(model, tokenizer, f"step {step}")
            if args.checkpoints:
                save_policy(model, tokenizer, f"{args.out_dir}.step{step}")

        extra = {"log_every": args.eval_every, "callback": callback}
    start = time.time()
    model, tokenizer = pp.build_and_save(
        args.out_dir,
        base_dir=args.base_dir,
        seed=args.seed,
        steps=args.steps,
        lr=args.lr,
        slip_steps=args.slip_steps,
        settle_steps=args.settle_steps,
        **extra,
    )
    print(f"built {args.out_dir} from {args.base_dir}: {time.time() - start:.1f}s")
    for path in sorted(Path(args.out_dir).iterdir()):
        print(f"  {path.name:28s} {path.stat().st_size / 1024:8.1f} KiB")
    if args.eval_prompts:
        summary(model, tokenizer, "final")
