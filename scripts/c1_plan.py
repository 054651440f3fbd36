"""Host memory and disk the advisor's c1 batches need at Qwen2.5 shapes, and the largest --c1_batch that fits.

c1 keeps each prompt's mean gradient (trainable parameters x 4 bytes) until its batch of --c1_batch prompts ends:
up to 8 GiB of them in host memory per rank, the rest memory-mapped in files beside the run's results
(grpo_mse.gradients.memory.c1_memory). This prints that estimate for --c1_batch before any work, then the
largest batch <= --c1_batch whose files fit the free disk under --dir (with --margin to spare) and whose host part
fits the available host memory. Exit 2 with one line when not even a batch of 2 fits.

  python scripts/c1_plan.py --qwen_shapes 1.5B --c1_batch 16 --dir outputs --out c1_plan.json
"""

import os
import shutil
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import UsageError
from grpo_mse.flags import Flags, option
from studies.benchmarks.qwen_shapes import QWEN2_5_SHAPES

GB = 1e9


@dataclass(kw_only=True)
class C1PlanConfig(Flags):
    """The model shapes and c1 batch to plan for, and the folder whose disk is measured."""

    qwen_shapes: str = option("1.5B", choices=sorted(QWEN2_5_SHAPES), help="model shapes")
    c1_batch: int = option(16, minimum=2, help="prompts per c1 batch wanted")
    dir: str = option(".", help="folder the run would write to (its disk is the one measured)")
    margin: float = option(0.1, minimum=0, maximum=0.9, help="share kept free")
    out: str | None = option(None, help="also write the plan as JSON here")


def main(argv=None) -> None:
    args = C1PlanConfig.from_argv(argv, description=__doc__)
    if not os.path.isdir(args.dir):
        raise UsageError(f"--dir {args.dir}: not a folder")
    if args.out:
        cli.writable_file(args.out, "--out")
    import torch
    from transformers import Qwen2ForCausalLM

    from grpo_mse.gradients.memory import C1_HOST_BYTES, c1_batch_that_fits, c1_memory, host_available
    from grpo_mse.tables.outputs import write_json
    from studies.benchmarks.qwen_shapes import qwen2_5_config

    with torch.device("meta"):  # shapes only: no memory
        params = [q for q in Qwen2ForCausalLM(qwen2_5_config(args.qwen_shapes)).to(torch.bfloat16).parameters()]
    disk_free, host_free = shutil.disk_usage(args.dir).free, host_available()
    plan = c1_memory(params, args.c1_batch, C1_HOST_BYTES)  # the estimate, printed before any work
    batch = c1_batch_that_fits(params, args.c1_batch, disk_free, host_free, args.margin)
    print(
        f"c1 at Qwen2.5-{args.qwen_shapes} shapes, --c1_batch {args.c1_batch}: {plan['host_bytes'] / GB:.3g} GB host, "
        f"{plan['disk_bytes'] / GB:.3g} GB disk ({plan['on_disk']} of {args.c1_batch} mean gradients of "
        f"{plan['vector_bytes'] / GB:.3g} GB in files); free: {disk_free / GB:.3g} GB disk under {args.dir}, "
        f"{host_free / GB:.3g} GB host"
    )
    record = {
        "qwen_shapes": args.qwen_shapes,
        "requested_c1_batch": args.c1_batch,
        "estimate": plan,
        "disk_free_bytes": disk_free,
        "host_available_bytes": host_free,
        "margin": args.margin,
        "requested_fits": batch == args.c1_batch,
        "chosen_c1_batch": batch,
    }
    if args.out:
        write_json(args.out, record)
    if batch is None:
        raise UsageError(
            f"c1 at Qwen2.5-{args.qwen_shapes} shapes does not fit even with --c1_batch 2 "
            f"({disk_free / GB:.3g} GB disk free under {args.dir}); free disk or use --no_advisor"
        )
    if batch != args.c1_batch:
        print(f"--c1_batch {args.c1_batch} would not fit; --c1_batch {batch} fits")
    else:
        print(f"--c1_batch {args.c1_batch} fits")


if __name__ == "__main__":
    cli.run(main)
