"""Why the oracle baseline can lose to vanilla: the exact identity, measured per prompt.

MSE_vanilla - MSE_oracle = (E||G s||^2 - E||(G - V) s||^2) / K = V (2 E[G ||s||^2] - V E||s||^2) / K,
so the oracle baseline helps iff E[||s||^2 | G = 1] > E||s||^2 / 2 (s = grad log pi(y|x)). When the
correct answers are short, confident sequences with small score norms and the wrong ones are long
and unlikely (large norms), the paper's Assumption 2 fails and the baseline adds noise.
"""

from dataclasses import dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.analysis import bootstrap
from grpo_mse.flags import Flags, option
from grpo_mse.rewards.rules import check_answers, row_reward
from grpo_mse.tables.inputs import check_oracle_values, check_prompts, load_rows
from grpo_mse.tables.outputs import write_json
from grpo_mse.tables.records import V_ORACLE, oracle_value


@dataclass(kw_only=True)
class ExplainBaselineConfig(Flags):
    """The policy and oracle table to measure, how much, and where the JSON goes."""

    model: str = option("assets/tiny_policy", help="local model folder or hub id (runs on CPU)")
    oracle_table: str = option(help="oracle table of calculate_oracle_v.py")
    prompts: int = option(12, minimum=1, help="prompts with 0.05 < V < 0.95 to measure")
    n: int = option(128, minimum=1, help="samples per prompt")
    out: str = option(help="output JSON file (replaced if it exists)")

    def __post_init__(self) -> None:
        super().__post_init__()  # bounds
        cli.writable_file(self.out, "--out")
        cli.check_model_path(self.model)


def score_norms(sampler, row: dict, key: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rewards, ||grad log pi(y|x)||^2) of n sampled continuations, one backward pass each (``sampler``: a
    policy.logprobs.PromptSampler)."""
    import torch

    from grpo_mse.gradients.statistics import dot64

    ids, continuations, texts = sampler.draw(row, (-1, key), n)
    params = [p for p in sampler.model.parameters() if p.requires_grad]
    logprob = sampler.logprob_fn(ids)
    norms = []
    for tokens in continuations:
        grads = torch.autograd.grad(logprob([tokens])[0], params)
        norms.append(dot64(grads, grads))
    rewards = [row_reward(row, t) for t in texts]
    return np.array(rewards), np.array(norms)


def main(argv=None) -> None:
    args = ExplainBaselineConfig.from_argv(argv, description=__doc__)
    table = load_rows(args.oracle_table, required=("prompt", "ground_truth", V_ORACLE))
    for check in (check_prompts, check_answers, check_oracle_values):
        check(table, args.oracle_table)
    rows = [r for r in table if 0.05 < oracle_value(r) < 0.95][: args.prompts]
    cli.require(bool(rows), f"{args.oracle_table}: no prompt with 0.05 < V_oracle < 0.95 to measure")
    from grpo_mse.policy.loading import eos_token_ids, load_policy
    from grpo_mse.policy.logprobs import PromptSampler  # torch loads after the inputs are checked
    from grpo_mse.policy.sampling import SamplingSettings

    model, tokenizer = load_policy(args.model, "cpu", "fp32")
    settings = SamplingSettings(tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, 1.0, 0.95, 32)
    sampler = PromptSampler(model, tokenizer, settings, 256, 0)
    per_prompt = []
    for index, row in enumerate(rows):
        rewards, norms = score_norms(sampler, row, row.get("id", index), args.n)
        value = oracle_value(row)
        right = float(norms[rewards == 1].mean()) if rewards.any() else float("nan")
        per_prompt.append(
            {
                "id": row.get("id"),
                "V_oracle": value,
                "E_norm2": float(norms.mean()),
                "E_norm2_given_correct": right,
                "E_norm2_given_wrong": float(norms[rewards == 0].mean()) if (rewards == 0).any() else None,
                "K_times_vanilla_minus_oracle": value
                * (2 * float((rewards * norms).mean()) - value * float(norms.mean())),
            }
        )
        print(
            f"id {row.get('id')}: V={value:.2f}  E||s||^2={norms.mean():.1f}  given correct={right:.1f}  "
            f"K*(MSE_vanilla - MSE_oracle)={per_prompt[-1]['K_times_vanilla_minus_oracle']:.1f}"
        )
    gaps = [r["K_times_vanilla_minus_oracle"] for r in per_prompt]
    mean_gap = float(np.mean(gaps))
    # the prompts as the units (each prompt's gap carries its own sampling noise): a BCa prompt bootstrap
    weights = bootstrap.prompt_weights(len(gaps), 4000, seed=0)
    gap_interval = bootstrap.interval(bootstrap.weighted_mean(weights, gaps), weights)
    summary = {
        "per_prompt": per_prompt,
        "mean_K_times_vanilla_minus_oracle": mean_gap,
        "mean_K_times_vanilla_minus_oracle_ci95": gap_interval,
        "oracle_helps_on": sum(r["K_times_vanilla_minus_oracle"] > 0 for r in per_prompt),
        "prompts": len(per_prompt),
        "note": __doc__.strip().splitlines()[2],
    }
    write_json(args.out, summary)
    shown = "n/a" if gap_interval is None else f"[{gap_interval[0]:.1f}, {gap_interval[1]:.1f}]"
    print(
        f"mean K*(MSE_vanilla - MSE_oracle) = {mean_gap:.1f}, 95% prompt-bootstrap interval {shown}; oracle helps on "
        f"{summary['oracle_helps_on']}/{len(per_prompt)} prompts -> {args.out}"
    )


if __name__ == "__main__":
    cli.run(main)
