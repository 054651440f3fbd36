"""The body of scripts/bench_sketch_seeds.py: is the sketched engine unbiased on a real model, and does its block
spread estimate its own error? For each of the first --prompts rows: one draw of M groups of K, the fast engine's
traces, then the sketched engine's under --seeds sketch seeds on the SAME samples. Per prompt and estimator: the mean
over seeds against the fast engine's (relative, with its standard error over seeds), the spread over seeds, and the
mean of the blocks' own estimate of that spread (sd of the R block traces over sqrt(R)).

  python scripts/bench_sketch_seeds.py --model "$(python scripts/real_llm.py smollm2)" \\
      --oracle_table results/benchmarks/smollm2_zero_shot_mid9.jsonl --prompts 1 --seeds 48 --out seeds.json
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json


@dataclass(kw_only=True)
class SketchSeedsConfig(Flags):
    """The model, the prompts, the group shape, the sketch and the output."""

    model: str = option(help="--model as run_tracecov.py takes it")
    oracle_table: str = option(help="an oracle table (prompt, ground_truth, V_oracle, id)")
    prompts: int = option(1, minimum=1, help="the first N rows")
    seeds: int = option(16, minimum=2, help="sketch seeds 0..N-1")
    M: int = option(2, minimum=2, help="groups per prompt")
    K: int = option(4, minimum=2, help="group size")
    sketch_dim: int = option(1 << 20, minimum=64, help="the sketch's d")
    out: str = option(help="the report (JSON)")


def main(argv=None) -> None:
    args = SketchSeedsConfig.from_argv(argv, description=__doc__)  # --help loads no torch
    import torch

    from grpo_mse.gradients.engine import prompt_traces
    from grpo_mse.gradients.trace_engines import EngineSettings
    from grpo_mse.policy.loading import eos_token_ids, load_policy
    from grpo_mse.policy.logprobs import PromptSampler
    from grpo_mse.policy.model_source import resolve
    from grpo_mse.policy.sampling import SamplingSettings
    from grpo_mse.rewards.rules import row_reward

    torch.set_num_threads(1)
    model, tokenizer = load_policy(resolve(args.model), "cpu", "fp32")
    with open(args.oracle_table, encoding="utf-8") as table:
        rows = [json.loads(line) for line in table][: args.prompts]
    eos = tuple(eos_token_ids(model, tokenizer))
    settings = SamplingSettings(eos, tokenizer.pad_token_id, temperature=1.0, top_p=0.95, max_new_tokens=32)
    sampler = PromptSampler(model, tokenizer, settings, gen_bs=64, seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    names, m, k = ("naive", "grpo", "oracleV"), args.M, args.K
    cells = []
    for row in rows:
        ids, continuations, texts = sampler.draw(row, (k, row["id"]), m * k)
        rewards = torch.tensor([row_reward(row, text, "row") for text in texts]).view(m, k).double()
        groups = [continuations[g * k : (g + 1) * k] for g in range(m)]
        logprob_fn, value = sampler.logprob_fn(ids), row["V_oracle"]
        fast = prompt_traces(logprob_fn, params, groups, rewards, value, names, EngineSettings()).traces
        draws = [
            prompt_traces(
                logprob_fn,
                params,
                groups,
                rewards,
                value,
                names,
                EngineSettings("sketched", sketch_dim=args.sketch_dim, sketch_seed=seed),
            )
            for seed in range(args.seeds)
        ]
        for name in names:
            if fast[name] == 0:  # no gradient at this prompt (rewards all equal to V)
                continue
            values = [draw.traces[name] for draw in draws]
            spread = statistics.stdev(values)
            blocks = statistics.fmean(
                statistics.stdev(d.blocks.traces[name]) / len(d.blocks.traces[name]) ** 0.5 for d in draws
            )
            cell = {
                "id": row["id"],
                "estimator": name,
                "fast": fast[name],
                "mean_over_seeds": statistics.fmean(values),
                "relative_difference": statistics.fmean(values) / fast[name] - 1,
                "its_standard_error": spread / len(values) ** 0.5 / fast[name],
                "relative_sd_over_seeds": spread / fast[name],
                "relative_sd_blocks_say": blocks / fast[name],
            }
            cells.append(cell)
            print(
                f"{row['id']} {name}: mean over {args.seeds} seeds {cell['relative_difference']:+.2e} from fast "
                f"(se {cell['its_standard_error']:.1e}); sd over seeds {cell['relative_sd_over_seeds']:.2e}, "
                f"blocks say {cell['relative_sd_blocks_say']:.2e}"
            )
    write_json(
        args.out,
        {
            "settings": {k: getattr(args, k) for k in ("model", "prompts", "seeds", "M", "K", "sketch_dim")},
            "cells": cells,
        },
    )
