"""The paper's Algorithm 1 as a CPU simulation: plain SGD ascent on the policy with a group estimator.

Each step draws B prompts from a training pool and K continuations per prompt, at a fixed budget of
N = B K sequences per step, and updates theta <- theta + lr (1/B) sum_x sum_k w_k grad log pi(y_k | x)
with the weights w of ``estimators.weights`` ("naive" = vanilla, "grpo", "oracleV").

The oracle baseline needs V_theta(x) at the current policy, which is unknown. Two stand-ins:
- "mc" (default): n_v extra continuations per prompt, drawn at the current policy independently of
  the K samples; the estimate stays unbiased but the baseline is noisy (a noisy oracle), and its
  sampling cost is NOT counted in the budget N;
- "running": a per-prompt exponential moving average of the rewards seen on earlier visits (global
  average for unseen prompts); it is free and, being fixed before the draw, keeps the estimate
  unbiased, but it lags behind the current policy.
The default top_p = 1 samples exactly from pi_theta, so the scores grad log pi match the samples.
Random streams: the prompts of a step and the continuations depend only on (seed, step, slot), so
the estimators and group sizes share draws where they can (common random numbers); the held-out
evaluation uses fixed streams, the same for every run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from grpo_mse.analysis.simulation_config import SimulationConfig
from grpo_mse.gradients import estimators as est
from grpo_mse.policy.logprobs import continuation_mask, shared_prompt_logprobs
from grpo_mse.policy.sampling import row_generators, sample_continuations, stream_seed

STREAM_PROMPTS, STREAM_TRAIN, STREAM_VALUE, STREAM_EVAL = 11, 12, 13, 14
RECORD_COLUMNS = ["K", "seed", "estimator", "step", "heldout_reward"]
SHARED_PREFILL_MIN = 12  # group size from which per-prompt sampling (shared prompt cache) is faster on CPU
SHARED_PROMPT_MIN_K = 4  # group size from which per-group log-probabilities (prompt run once) are faster on CPU


@dataclass(frozen=True)
class SimulationSampler:
    """How continuations are drawn: softmax(logits / temperature), nucleus top_p, at most max_new_tokens."""

    eos_ids: tuple[int, ...]
    pad_id: int
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    batch_size: int = 256

    def draw(self, model, prompts: list[list[int]], generators: list[torch.Generator]) -> list[list[int]]:
        """One continuation per (prompt, generator) row."""
        return sample_continuations(model, prompts, generators, temperature=self.temperature, top_p=self.top_p,
                                    max_new_tokens=self.max_new_tokens, eos_ids=list(self.eos_ids),
                                    pad_id=self.pad_id, batch_size=self.batch_size)


@dataclass
class PromptPool:
    """Prompt token ids and a reward function reward(prompt index, continuations) -> list of G in {0, 1}."""

    ids: list[list[int]]
    reward: Callable[[int, list[list[int]]], list[float]]

    def __len__(self) -> int:
        return len(self.ids)


def draw_groups(model, pool: PromptPool, indices: list[int], count: int, sampler: SimulationSampler,
                key: tuple[int, ...]) -> list[list[list[int]]]:
    """count continuations of each prompt pool.ids[i]; row j of slot b uses stream (*key, b) sample j.

    Large groups are drawn one prompt at a time (the sampler then runs the prompt once for the group),
    small ones all together; the continuations are the same either way (one stream per row).
    """
    if count >= SHARED_PREFILL_MIN:
        return [sampler.draw(model, [pool.ids[index]] * count, row_generators(*key, slot, count=count))
                for slot, index in enumerate(indices)]
    prompts, generators = [], []
    for slot, index in enumerate(indices):
        prompts += [pool.ids[index]] * count
        generators += row_generators(*key, slot, count=count)
    flat = sampler.draw(model, prompts, generators)
    return [flat[b * count:(b + 1) * count] for b in range(len(indices))]


def group_rewards(pool: PromptPool, indices: list[int], groups: list[list[list[int]]]) -> torch.Tensor:
    """[B, K] rewards G_bk of the groups."""
    return torch.tensor([pool.reward(index, group) for index, group in zip(indices, groups)], dtype=torch.float64)


class MonteCarloValue:
    """Noisy oracle: V(x) ~ mean reward of n_v fresh samples at the current policy (independent of the K)."""

    def __init__(self, n_v: int, sampler: SimulationSampler):
        self.n_v, self.sampler = n_v, sampler

    def __call__(self, model, pool: PromptPool, indices: list[int], key: tuple[int, ...]) -> torch.Tensor:
        """[B] V_hat(x) = (1/n_v) sum_j G(y_j), y_j ~ pi_theta(. | x) on stream STREAM_VALUE."""
        groups = draw_groups(model, pool, indices, self.n_v, self.sampler, (STREAM_VALUE, *key))
        return group_rewards(pool, indices, groups).mean(-1)

    def observe(self, indices: list[int], rewards: torch.Tensor) -> None:
        """Nothing to remember."""


class RunningValue:
    """Held-out running estimate: per-prompt EMA v <- (1 - a) v + a mean(G) of earlier visits only."""

    def __init__(self, alpha: float = 0.5, prior: float = 0.5):
        self.alpha, self.global_value, self.values = alpha, prior, {}

    def __call__(self, model, pool: PromptPool, indices: list[int], key: tuple[int, ...]) -> torch.Tensor:
        """[B] stored V of each prompt (the global EMA for prompts not seen yet)."""
        return torch.tensor([self.values.get(i, self.global_value) for i in indices], dtype=torch.float64)

    def observe(self, indices: list[int], rewards: torch.Tensor) -> None:
        """v_x <- (1 - a) v_x + a mean_k G_k, after the step that used the old v_x."""
        for index, mean in zip(indices, rewards.mean(-1).tolist()):
            self.values[index] = (1 - self.alpha) * self.values.get(index, self.global_value) + self.alpha * mean
        self.global_value = (1 - self.alpha) * self.global_value + self.alpha * float(rewards.mean())


def batch_logprobs(model, prompts: list[list[int]], groups: list[list[list[int]]],
                   sampler: SimulationSampler) -> torch.Tensor:
    """[B, K] lp_bk = sum_t log pi(y_bk,t | x_b, y_bk,<t) with gradients, all groups in one forward pass.

    Rows are [left-padded prompt | right-padded continuation], so every continuation starts at the same
    column; same values as ``logprobs.shared_prompt_logprobs`` group by group (EOS included).
    """
    device = next(model.parameters()).device
    rows = [(prompt, y) for prompt, group in zip(prompts, groups) for y in group]
    left, width = max(len(p) for p in prompts), max(len(y) for _, y in rows)
    ids = torch.full((len(rows), left + width), sampler.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (prompt, y) in enumerate(rows):
        ids[row, left - len(prompt):left + len(y)] = torch.tensor(prompt + y)
        mask[row, left - len(prompt):left + len(y)] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp_(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=width + 1).logits
    logp = torch.log_softmax(logits[:, :-1, :].float() / sampler.temperature, dim=-1)
    token_lp = logp.gather(-1, ids[:, left:].unsqueeze(-1)).squeeze(-1)
    real = continuation_mask([y for _, y in rows], list(sampler.eos_ids), include_eos=True).to(device)
    return (token_lp * real).sum(-1).view(len(prompts), -1)


def group_logprobs(model, prompts: list[list[int]], groups: list[list[list[int]]],
                   sampler: SimulationSampler) -> torch.Tensor:
    """[B, K] lp_bk: one pass over all rows for small groups, else one shared-prompt pass per group (faster on CPU)."""
    if len(groups[0]) < SHARED_PROMPT_MIN_K:
        return batch_logprobs(model, prompts, groups, sampler)
    return torch.stack([shared_prompt_logprobs(model, prompt, group, eos_ids=list(sampler.eos_ids),
                                               pad_id=sampler.pad_id, temperature=sampler.temperature)
                        for prompt, group in zip(prompts, groups)])


def ascend(model, prompts: list[list[int]], groups: list[list[list[int]]], w: torch.Tensor, lr: float,
           sampler: SimulationSampler) -> None:
    """theta <- theta + lr (1/B) sum_b sum_k w_bk grad lp_bk (groups whose weights are all 0 are left out)."""
    model.zero_grad(set_to_none=True)
    active = [b for b in range(len(prompts)) if bool(w[b].abs().sum() > 0)]
    if active:
        lp = group_logprobs(model, [prompts[b] for b in active], [groups[b] for b in active], sampler)
        ((w[active].to(lp.dtype) * lp).sum() / len(prompts)).backward()
        with torch.no_grad():
            for param in model.parameters():
                if param.grad is not None:
                    param.add_(param.grad, alpha=lr)
    model.zero_grad(set_to_none=True)


def sgd_step(model, pool: PromptPool, indices: list[int], *, K: int, estimator: str, lr: float,
             sampler: SimulationSampler, key: tuple[int, ...], baseline=None) -> torch.Tensor:
    """One step of Algorithm 1 on prompts ``indices``: draw K continuations each, theta += lr g_hat; returns G [B, K].

    g_hat = (1/B) sum_b sum_k w_bk grad lp_bk; for "oracleV", V comes from ``baseline(model, pool, indices, key)``.
    """
    groups = draw_groups(model, pool, indices, K, sampler, (STREAM_TRAIN, *key))
    rewards = group_rewards(pool, indices, groups)
    values = baseline(model, pool, indices, key) if est.get(estimator).needs_value else None
    ascend(model, [pool.ids[i] for i in indices], groups, est.weights(estimator, rewards, values), lr, sampler)
    return rewards


@torch.no_grad()
def expected_reward(model, pool: PromptPool, n_samples: int, sampler: SimulationSampler, seed: int = 0) -> float:
    """Monte Carlo E_x E_y G = mean over prompts and n_samples fixed-stream samples of the reward."""
    indices = list(range(len(pool)))
    groups = draw_groups(model, pool, indices, n_samples, sampler, (STREAM_EVAL, seed))
    return float(group_rewards(pool, indices, groups).mean())


def step_prompts(pool_size: int, batch: int, seed: int, step: int) -> list[int]:
    """B distinct prompt indices of a step, drawn uniformly from the pool with stream (seed, step)."""
    rng = np.random.default_rng(stream_seed(STREAM_PROMPTS, seed, step))
    return rng.choice(pool_size, size=batch, replace=False).tolist()


def make_baseline(config: SimulationConfig, sampler: SimulationSampler):
    """The V stand-in of the oracle estimator: MonteCarloValue(n_v) or RunningValue()."""
    if config.oracle == "mc":
        return MonteCarloValue(config.n_v, sampler)
    if config.oracle == "running":
        return RunningValue()
    raise ValueError(f"unknown oracle {config.oracle!r}; choose mc or running")


def eval_steps(config: SimulationConfig) -> set[int]:
    """Steps after which the held-out reward is measured: every eval_every steps and the last one."""
    every = config.eval_every if config.eval_every > 0 else config.steps
    return {s for s in range(every, config.steps + 1, every)} | {config.steps}


def train_run(model, train: PromptPool, heldout: PromptPool, sampler: SimulationSampler, config: SimulationConfig, *,
              K: int, seed: int, estimator: str, progress=None) -> list[dict]:
    """One SGD run from the model's current parameters; records at the evaluation steps (not step 0)."""
    baseline, batch, records = make_baseline(config, sampler), config.batch(K), []
    checkpoints = eval_steps(config)
    for step in range(config.steps):
        indices = step_prompts(len(train), batch, seed, step)
        rewards = sgd_step(model, train, indices, K=K, estimator=estimator, lr=config.lr, sampler=sampler,
                           key=(seed, step), baseline=baseline)
        baseline.observe(indices, rewards)
        if step + 1 in checkpoints:
            value = expected_reward(model, heldout, config.heldout_samples, sampler, config.heldout_seed)
            records.append({"K": K, "seed": seed, "estimator": estimator, "step": step + 1, "heldout_reward": value})
        if progress is not None:
            progress(1)
    return records


def load_task(config: SimulationConfig) -> tuple:
    """(model, training pool, held-out pool, sampler) of the arithmetic task with the policy config.model."""
    from grpo_mse.builtin.arithmetic import make_rows
    from grpo_mse.policy.loading import eos_token_ids, load_policy

    model, tokenizer = load_policy(config.model, "cpu", "fp32")
    train = text_pool(tokenizer, make_rows(config.train_prompts, seed=config.train_seed, style=config.style))
    heldout = text_pool(tokenizer, make_rows(config.heldout_prompts, seed=config.heldout_seed, style=config.style))
    sampler = SimulationSampler(eos_ids=tuple(eos_token_ids(model, tokenizer)), pad_id=tokenizer.pad_token_id,
                                temperature=config.temperature, top_p=config.top_p,
                                max_new_tokens=config.max_new_tokens)
    return model, train, heldout, sampler


def run_simulation(config: SimulationConfig, task: tuple | None = None, progress=None) -> list[dict]:
    """Records (K, seed, estimator, step, heldout_reward) of every run, each starting from the same parameters.

    ``task`` = (model, train pool, held-out pool, sampler), by default ``load_task(config)``. Step 0 is the
    starting policy's held-out reward (measured once: the evaluation streams are the same for every run).
    """
    model, train, heldout, sampler = task if task is not None else load_task(config)
    initial = copy.deepcopy(model.state_dict())
    start_value = expected_reward(model, heldout, config.heldout_samples, sampler, config.heldout_seed)
    records = []
    for K in config.K_list:
        for seed in config.seeds:
            for estimator in config.estimators:
                model.load_state_dict(initial)
                records.append({"K": K, "seed": seed, "estimator": estimator, "step": 0, "heldout_reward": start_value})
                records += train_run(model, train, heldout, sampler, config, K=K, seed=seed, estimator=estimator,
                                     progress=progress)
    model.load_state_dict(initial)
    return records


def text_pool(tokenizer, rows: list[dict]) -> PromptPool:
    """Pool of chat-formatted prompts with the 0/1 reward of the decoded text under each row's rule (row_reward)."""
    from grpo_mse.rewards.rules import row_reward
    from grpo_mse.tables.inputs import prompt_ids

    def reward(index: int, continuations: list[list[int]]) -> list[float]:
        texts = tokenizer.batch_decode(continuations, skip_special_tokens=True)
        return [row_reward(rows[index], text) for text in texts]

    return PromptPool([prompt_ids(tokenizer, row["prompt"]) for row in rows], reward)


def final_records(records: list[dict]) -> list[dict]:
    """The record of the last step of each (K, seed, estimator) run."""
    last = {}
    for record in records:
        run = (record["K"], record["seed"], record["estimator"])
        if run not in last or record["step"] > last[run]["step"]:
            last[run] = record
    return list(last.values())



def final_table(records: list[dict]) -> dict[str, dict[str, dict]]:
    """{estimator: {K: mean and Student-t 95% half-width of the final held-out reward over seeds}}."""
    from grpo_mse.tables.outputs import mean_t_ci

    values: dict[str, dict[int, list[float]]] = {}
    for record in final_records(records):
        values.setdefault(record["estimator"], {}).setdefault(record["K"], []).append(record["heldout_reward"])
    def stats(rewards: list[float]) -> dict:
        return {key: (None if value != value else value) for key, value in mean_t_ci(rewards).items()}  # NaN -> null

    return {name: {str(K): stats(by_k[K]) for K in sorted(by_k)} for name, by_k in values.items()}


def best_group_sizes(table: dict[str, dict]) -> tuple[int, list[int]]:
    """(K with the highest mean final reward, all K whose 95% interval overlaps the best one's)."""
    best = max(table, key=lambda k: table[k]["mean"])
    floor = table[best]["mean"] - half_width(table[best])
    return int(best), [int(k) for k in table if table[k]["mean"] + half_width(table[k]) >= floor]


def half_width(stats: dict) -> float:
    """95% half-width, 0 when undefined (a single seed)."""
    return stats["ci95"] if stats["ci95"] is not None and stats["ci95"] == stats["ci95"] else 0.0


def nearest_grid_k(k_star: float, K_list) -> int:
    """The K of the grid closest to K* on the log2 scale."""
    return int(min(K_list, key=lambda k: abs(np.log2(k) - np.log2(k_star))))


def agreement(best: int, near_best: list[int], k_star: float | None, K_list) -> tuple[str, str]:
    """(verdict, sentence): "agrees" | "consistent within noise" | "disagrees" | "no K*" between best K and K*."""
    if k_star is None or not np.isfinite(k_star):
        return "no K*", f"best K = {best}; no advisor K* to compare with"
    grid = nearest_grid_k(k_star, K_list)
    if grid == best:
        verdict = "agrees"
    elif grid in near_best:
        verdict = "consistent within noise"
    else:
        verdict = "disagrees"
    return verdict, (f"best K = {best} (K within its 95% interval: {near_best}); advisor K* = {k_star:.3g} "
                     f"(nearest grid K = {grid}): {verdict}")


def read_advisor(path: str) -> dict:
    """K*, its interval and c1, c2, c3 from a tracecov results JSON with a ``group_size_advisor`` entry."""
    import json

    with open(path, encoding="utf-8") as handle:
        result = json.load(handle)
    if "group_size_advisor" not in result:
        raise ValueError(f"{path}: no group_size_advisor entry")
    advice = result["group_size_advisor"]
    config = result.get("config", {})
    pooled, ci = advice["pooled"], advice.get("ci95", {})
    return {"path": path, "K_star": pooled.get("K_star_exact"), "K_star_ci95": ci.get("K_star_exact"),
            "K_star_paper": pooled.get("K_star_paper"), "K_best": pooled.get("K_best"),
            **{c: advice["pooled"].get(c) for c in ("c1", "c2", "c3")},
            "config": {k: config.get(k) for k in ("model", "temperature", "top_p", "max_new_tokens", "T", "M")}}


def learning_statement(table: dict[str, dict], initial: float) -> str:
    """Whether some (estimator, K) ends above the starting reward by more than its 95% half-width."""
    cells = [(stats["mean"] - half_width(stats), name, k, stats["mean"]) for name, by_k in table.items()
             for k, stats in by_k.items()]
    lower, name, k, mean = max(cells)
    if lower > initial:
        return f"learning happened: e.g. {name} K={k} ends at {mean:.4f} > start {initial:.4f} (beyond its 95% CI)"
    best = max(cells, key=lambda cell: cell[3])
    return (f"no measurable learning: no final mean is above the start {initial:.4f} beyond its 95% CI "
            f"(highest: {best[1]} K={best[2]} at {best[3]:.4f})")


def summarize(records: list[dict], K_list, advisor: dict | None = None, reference: str = "grpo") -> dict:
    """Final reward (mean, 95% CI over seeds) per estimator and K, best K, and its agreement with the advisor's K*."""
    table = final_table(records)
    best = {name: best_group_sizes(by_k) for name, by_k in table.items()}
    k_star = advisor.get("K_star") if advisor else None
    ref = reference if reference in table else next(iter(table))
    verdict, sentence = agreement(*best[ref], k_star, K_list)
    initial = next(r["heldout_reward"] for r in records if r["step"] == 0)
    return {
        "initial_reward": initial,
        "learning": learning_statement(table, initial),
        "final_reward": table,
        "best_K": {name: pair[0] for name, pair in best.items()},
        "K_within_ci_of_best": {name: pair[1] for name, pair in best.items()},
        "advisor": advisor,
        "agreement": {"estimator": ref, "verdict": verdict, "statement": f"{ref}: {sentence}"},
    }
