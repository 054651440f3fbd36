"""Why the oracle baseline can lose to vanilla: the exact identity, measured per prompt.

MSE_vanilla - MSE_oracle = (E||G s||^2 - E||(G - V) s||^2) / K = V (2 E[G ||s||^2] - V E||s||^2) / K,
so the oracle baseline helps iff E[||s||^2 | G = 1] > E||s||^2 / 2 (s = grad log pi(y|x)). When the
correct answers are short, confident sequences with small score norms and the wrong ones are long
and unlikely (large norms), the paper's Assumption 2 fails and the baseline adds noise.
"""

from dataclasses import asdict, dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.analysis import bootstrap
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.policy.model_source import check_model_path
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
    per_position: bool = option(
        False,
        help="also split each sample's ||s||^2 by token position (one backward pass per generated token instead of "
        "one per sample): ||s_t||^2 of each token's own score and the cross terms, saved per sample",
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # bounds
        cli.writable_file(self.out, "--out")
        check_model_path(self.model)


@dataclass(frozen=True)
class Sample:
    """One sampled continuation: its length in generated tokens, whether an EOS ended it, its reward, ||s||^2 of its
    score s = grad log pi(y|x), and (``--per_position``) ||s_t||^2 of each token's own term s_t = grad log
    pi(y_t | x, y_<t) (so ||s||^2 = sum_t ||s_t||^2 + the cross terms sum_{t != u} <s_t, s_u>)."""

    length: int
    eos: bool
    reward: float
    norm2: float
    position_norm2: list[float] | None = None

    @property
    def cross(self) -> float | None:
        """||s||^2 less the tokens' own squared norms: what the positions' correlation adds (None: not split)."""
        return None if self.position_norm2 is None else self.norm2 - sum(self.position_norm2)


def score_norms(sampler, row: dict, key: int, n: int, per_position: bool = False) -> list[Sample]:
    """The n sampled continuations of ``row`` (random stream (-1, key)) with their rewards and score norms, one
    backward pass each, or one per token with ``per_position`` (``sampler``: a policy.logprobs.PromptSampler).

    Per position: c_t = grad log pi(y_<=t | x), the score of the first t tokens (a prefix that stops before the EOS
    scores no EOS), so s_t = c_t - c_{t-1} and ||s_t||^2 = ||c_t||^2 - 2 <c_t, c_{t-1}> + ||c_{t-1}||^2, with c_L = s;
    two model-sized gradients are held at a time."""
    import torch

    from grpo_mse.gradients.statistics import dot64

    ids, continuations, texts = sampler.draw(row, (-1, key), n)
    params = [p for p in sampler.model.parameters() if p.requires_grad]
    logprob = sampler.logprob_fn(ids)
    eos = set(sampler.settings.eos_ids)
    samples = []
    for tokens, text in zip(continuations, texts):
        ends = range(1, len(tokens) + 1) if per_position else [len(tokens)]
        previous, previous_sq, positions = None, 0.0, []
        for end in ends:
            grads = torch.autograd.grad(logprob([tokens[:end]])[0], params)
            square = dot64(grads, grads)
            cross = dot64(grads, previous) if previous is not None else 0.0
            positions.append(square - 2.0 * cross + previous_sq)
            previous, previous_sq = grads, square
        reward = row_reward(row, text)
        ended = bool(tokens) and tokens[-1] in eos
        samples.append(Sample(len(tokens), ended, reward, previous_sq, positions if per_position else None))
    return samples


def by_length(samples: list[Sample]) -> list[dict]:
    """Per response length L: how many samples, their mean ||s||^2, mean per-token ||s_t||^2 and the cross terms'
    share of ||s||^2 (per position only): how the score norm grows with length."""
    out = []
    for length in sorted({s.length for s in samples}):
        group = [s for s in samples if s.length == length]
        entry = {"length": length, "n": len(group), "mean_norm2": float(np.mean([s.norm2 for s in group]))}
        if group[0].position_norm2 is not None:
            entry["mean_token_norm2"] = float(np.mean([np.mean(s.position_norm2) for s in group if s.length]))
            entry["cross_share"] = float(sum(s.cross for s in group) / sum(s.norm2 for s in group))
        out.append(entry)
    return out


def main(argv=None) -> None:
    args = ExplainBaselineConfig.from_argv(argv, description=__doc__)
    table = load_rows(args.oracle_table, required=("prompt", "ground_truth", V_ORACLE))
    for check in (check_prompts, check_answers, check_oracle_values):
        check(table, args.oracle_table)
    rows = [r for r in table if 0.05 < oracle_value(r) < 0.95][: args.prompts]
    require(bool(rows), f"{args.oracle_table}: no prompt with 0.05 < V_oracle < 0.95 to measure")
    from grpo_mse.policy.loading import eos_token_ids, load_policy
    from grpo_mse.policy.logprobs import PromptSampler  # torch loads after the inputs are checked
    from grpo_mse.policy.sampling import SamplingSettings

    model, tokenizer = load_policy(args.model, "cpu", "fp32")
    settings = SamplingSettings(tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, 1.0, 0.95, 32)
    sampler = PromptSampler(model, tokenizer, settings, 256, 0)
    per_prompt, per_sample = [], []
    for index, row in enumerate(rows):
        samples = score_norms(sampler, row, row.get("id", index), args.n, args.per_position)
        per_sample += [{"id": row.get("id"), **asdict(sample), "cross": sample.cross} for sample in samples]
        rewards, norms = np.array([s.reward for s in samples]), np.array([s.norm2 for s in samples])
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
                # the oracle baseline's K x tr Cov less ||g||^2 (its one-group MSE x K, ||g||^2 apart), from V and norms
                "E_oracle_term": float((((rewards - value) ** 2) * norms).mean()),
                "mean_length": float(np.mean([s.length for s in samples])),
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
        "by_length": by_length(
            [Sample(**{k: v for k, v in r.items() if k not in ("id", "cross")}) for r in per_sample]
        ),
        "per_sample": per_sample,
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
