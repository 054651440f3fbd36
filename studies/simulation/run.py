"""The paper's Algorithm 1 as a CPU simulation: gradient ascent on the policy with a group estimator.

Each step draws B prompts from a training pool and K continuations per prompt, at a fixed budget of
N = B K sequences per step, forms g_hat = (1/B) sum_x sum_k w_k grad log pi(y_k | x) with the weights w
of ``estimators.weights`` (vanilla, GRPO, oracle baseline) and updates the policy with it: plain SGD
theta <- theta + lr g_hat (the paper's rule, the default) or AdamW on the loss -g_hat's surrogate with
gradient clipping (the optimiser of the TRL backend; one update per step where TRL makes four).

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
from dataclasses import dataclass, replace

import numpy as np
import torch

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.gradients import estimators as est
from grpo_mse.policy.loading import load_policy
from grpo_mse.policy.logprobs import continuation_mask, shared_prompt_logprobs, token_log_probs
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.policy.sampling import HFSampler, SamplingSettings, stream_seed
from grpo_mse.rewards.rules import row_reward
from grpo_mse.tables.inputs import prompt_ids
from studies.simulation.config import SimulationConfig
from studies.simulation.records import SimulationRecord

STREAM_PROMPTS, STREAM_TRAIN, STREAM_VALUE, STREAM_EVAL = 11, 12, 13, 14
SHARED_PREFILL_MIN = 12  # group size from which per-prompt sampling (shared prompt cache) is faster on CPU
SHARED_PROMPT_MIN_K = 4  # group size from which per-group log-probabilities (prompt run once) are faster on CPU
SAMPLING_BATCH = 256  # sequences per sampling batch
GREEDY_TOP_P = 1e-9  # a nucleus this small holds only the most likely token: sampling from it is greedy decoding


@dataclass
class SimulationRun:
    """The sweep over K (at fixed budget N = B K), seeds and estimators, read top to bottom: ``load`` (policy,
    prompt pools, samplers), ``sweep`` (every run from the same starting parameters), ``train`` (one run:
    ``policy_step`` per step, the held-out metric at the evaluation steps), ``evaluate``."""

    config: SimulationConfig
    train_pool: PromptPool
    heldout: PromptPool
    sampler: HFSampler  # holds the policy, updated in place
    greedy: HFSampler  # the same policy, decoded greedily (for --heldout_greedy)

    @classmethod
    def load(cls, config: SimulationConfig) -> SimulationRun:
        """The arithmetic task with the policy config.model (CPU, fp32; a mistyped local folder is one line)."""
        check_model_path(config.model)
        model, tokenizer = load_policy(config.model, "cpu", "fp32")
        train = text_pool(tokenizer, make_rows(config.train_prompts, seed=config.train_seed, style=config.style))
        heldout = text_pool(tokenizer, make_rows(config.heldout_prompts, seed=config.heldout_seed, style=config.style))
        settings = SamplingSettings.of_run(config, model, tokenizer)
        greedy = HFSampler(model, replace(settings, top_p=GREEDY_TOP_P), SAMPLING_BATCH)
        return cls(config, train, heldout, HFSampler(model, settings, SAMPLING_BATCH), greedy)

    def sweep(self, progress=None) -> list[SimulationRecord]:
        """Every (K, seed, estimator) run, each from the same starting parameters (restored at the end).

        Step 0 is the starting policy's held-out metric, measured once (the evaluation streams are the same
        for every run); ``progress(1)`` is called after every update step."""
        config, model = self.config, self.sampler.model
        initial = copy.deepcopy(model.state_dict())
        start_value = self.evaluate()
        records = []
        for K in config.K_list:
            for seed in config.seeds:
                for estimator in config.estimators:
                    model.load_state_dict(initial)
                    records.append(SimulationRecord(K, seed, estimator, 0, start_value))
                    records += self.train(K, seed, estimator, progress)
        model.load_state_dict(initial)
        return records

    def train(self, K: int, seed: int, estimator: str, progress=None) -> list[SimulationRecord]:
        """One run from the model's current parameters (a fresh optimiser); records at the evaluation steps
        (not step 0)."""
        config = self.config
        baseline, batch, records = make_baseline(config, self.sampler), config.batch(K), []
        optimizer = make_optimizer(config, self.sampler.model)
        checkpoints = eval_steps(config)
        for step in range(config.steps):
            indices = step_prompts(len(self.train_pool), batch, seed, step)
            rewards = policy_step(
                self.train_pool,
                indices,
                K=K,
                estimator=estimator,
                optimizer=optimizer,
                sampler=self.sampler,
                key=(seed, step),
                baseline=baseline,
            )
            baseline.observe(indices, rewards)
            if step + 1 in checkpoints:
                records.append(SimulationRecord(K, seed, estimator, step + 1, self.evaluate()))
            if progress is not None:
                progress(1)
        return records

    def evaluate(self) -> float:
        """Held-out metric: greedy accuracy (--heldout_greedy) or expected reward on the fixed evaluation streams."""
        if self.config.heldout_greedy:
            return expected_reward(self.heldout, 1, self.greedy)
        return expected_reward(self.heldout, self.config.heldout_samples, self.sampler, self.config.heldout_seed)


@dataclass
class PromptPool:
    """Prompt token ids and a reward function reward(prompt index, continuations) -> list of G in {0, 1}."""

    ids: list[list[int]]
    reward: Callable[[int, list[list[int]]], list[float]]

    def __len__(self) -> int:
        return len(self.ids)


def text_pool(tokenizer, rows: list[dict]) -> PromptPool:
    """Pool of chat-formatted prompts with the 0/1 reward of the decoded text under each row's rule (row_reward)."""

    def reward(index: int, continuations: list[list[int]]) -> list[float]:
        texts = tokenizer.batch_decode(continuations, skip_special_tokens=True)
        return [row_reward(rows[index], text) for text in texts]

    return PromptPool([prompt_ids(tokenizer, row["prompt"]) for row in rows], reward)


def step_prompts(pool_size: int, batch: int, seed: int, step: int) -> list[int]:
    """B distinct prompt indices of a step, drawn uniformly from the pool with stream (seed, step)."""
    rng = np.random.default_rng(stream_seed(STREAM_PROMPTS, seed, step))
    return rng.choice(pool_size, size=batch, replace=False).tolist()


def eval_steps(config: SimulationConfig) -> set[int]:
    """Steps after which the held-out reward is measured: every eval_every steps and the last one."""
    every = config.eval_every if config.eval_every > 0 else config.steps
    return {s for s in range(every, config.steps + 1, every)} | {config.steps}


def policy_step(
    pool: PromptPool,
    indices: list[int],
    *,
    K: int,
    estimator: str,
    optimizer: SGDAscent | AdamWAscent,
    sampler: HFSampler,
    key: tuple[int, ...],
    baseline=None,
) -> torch.Tensor:
    """One step of Algorithm 1 on prompts ``indices``: draw K continuations each, update with g_hat; returns G [B, K].

    g_hat = (1/B) sum_b sum_k w_bk grad lp_bk; for the oracle baseline, V comes from ``baseline(pool, indices, key)``.
    """
    groups = draw_groups(pool, indices, K, sampler, (STREAM_TRAIN, *key))
    rewards = group_rewards(pool, indices, groups)
    values = baseline(pool, indices, key) if est.get(estimator).needs_value else None
    sampler.model.zero_grad(set_to_none=True)
    estimate_gradient([pool.ids[i] for i in indices], groups, est.weights(estimator, rewards, values), sampler)
    optimizer.step()
    sampler.model.zero_grad(set_to_none=True)
    return rewards


def draw_groups(
    pool: PromptPool, indices: list[int], count: int, sampler: HFSampler, key: tuple[int, ...]
) -> list[list[list[int]]]:
    """count continuations of each prompt pool.ids[i]; row j of slot b uses stream (*key, b) sample j.

    Large groups are drawn one prompt at a time (the sampler then runs the prompt once for the group),
    small ones all together; the continuations are the same either way (one stream per row).
    """
    requests = [(pool.ids[index], count, (*key, slot)) for slot, index in enumerate(indices)]
    if count >= SHARED_PREFILL_MIN:
        return [sampler.sample([request])[0] for request in requests]
    return sampler.sample(requests)


def group_rewards(pool: PromptPool, indices: list[int], groups: list[list[list[int]]]) -> torch.Tensor:
    """[B, K] rewards G_bk of the groups."""
    return torch.tensor([pool.reward(index, group) for index, group in zip(indices, groups)], dtype=torch.float64)


def prompts_logprobs(
    model,
    prompts: list[list[int]],
    groups: list[list[list[int]]],
    *,
    eos_ids: list[int],
    pad_id: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """[B, K] lp_bk of group b's continuations given prompt b, every group in one forward pass (EOS included).

    Rows are [left-padded prompt | right-padded continuation], so every continuation starts at the same
    column; same values as ``shared_prompt_logprobs`` group by group (faster for many small groups).
    """
    device = next(model.parameters()).device
    rows = [(prompt, y) for prompt, group in zip(prompts, groups) for y in group]
    left, width = max(len(p) for p in prompts), max(len(y) for _, y in rows)
    ids = torch.full((len(rows), left + width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (prompt, y) in enumerate(rows):
        ids[row, left - len(prompt) : left + len(y)] = torch.tensor(prompt + y)
        mask[row, left - len(prompt) : left + len(y)] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp_(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=width + 1).logits
    token_lp = token_log_probs(logits[:, :-1, :], temperature).gather(-1, ids[:, left:].unsqueeze(-1)).squeeze(-1)
    real = continuation_mask([y for _, y in rows], eos_ids, include_eos=True).to(device)
    return (token_lp * real).sum(-1).view(len(prompts), -1)


def group_logprobs(prompts: list[list[int]], groups: list[list[list[int]]], sampler: HFSampler) -> torch.Tensor:
    """[B, K] lp_bk: one pass over all rows for small groups, else one shared-prompt pass per group (faster on CPU)."""
    s = sampler.settings
    if len(groups[0]) < SHARED_PROMPT_MIN_K:
        return prompts_logprobs(
            sampler.model, prompts, groups, eos_ids=list(s.eos_ids), pad_id=s.pad_id, temperature=s.temperature
        )
    return torch.stack(
        [
            shared_prompt_logprobs(
                sampler.model, prompt, group, eos_ids=list(s.eos_ids), pad_id=s.pad_id, temperature=s.temperature
            )
            for prompt, group in zip(prompts, groups)
        ]
    )


def estimate_gradient(prompts: list[list[int]], groups: list[list[list[int]]], w: torch.Tensor, sampler: HFSampler):
    """Accumulate g_hat = (1/B) sum_b sum_k w_bk grad lp_bk into the parameters' .grad (zeroed by the caller);
    groups whose weights are all 0 are left out (no .grad at all when every group is)."""
    active = [b for b in range(len(prompts)) if bool(w[b].abs().sum() > 0)]
    if active:
        lp = group_logprobs([prompts[b] for b in active], [groups[b] for b in active], sampler)
        ((w[active].to(lp.dtype) * lp).sum() / len(prompts)).backward()


class SGDAscent:
    """Plain gradient ascent, the paper's Algorithm 1: theta <- theta + lr .grad (.grad holds g_hat)."""

    def __init__(self, params, lr: float):
        self.params, self.lr = list(params), lr

    @torch.no_grad()
    def step(self) -> None:
        """theta += lr g_hat for every parameter with a gradient."""
        for param in self.params:
            if param.grad is not None:
                param.add_(param.grad, alpha=self.lr)


class AdamWAscent:
    """AdamW ascent as the TRL backend's optimiser: torch.optim.AdamW (betas 0.9/0.999, eps 1e-8, decoupled
    weight decay on every parameter; HF's Trainer exempts biases and norms, whose decay is negligible here)
    minimising the loss -(g_hat's surrogate), after clipping the global gradient norm to max_grad_norm (0: none).
    A parameter without .grad (no active group) gets a zero gradient, so the moments and weight decay still
    advance, as in a trainer step on an all-zero-advantage batch."""

    def __init__(self, params, lr: float, weight_decay: float, max_grad_norm: float):
        self.params, self.max_grad_norm = list(params), max_grad_norm
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)

    def step(self) -> None:
        """.grad <- -g_hat (clipped), then one AdamW step."""
        with torch.no_grad():
            for param in self.params:
                param.grad = torch.zeros_like(param) if param.grad is None else param.grad.neg()
        if self.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()


def make_optimizer(config: SimulationConfig, model) -> SGDAscent | AdamWAscent:
    """The update rule of one run (a fresh one per run: AdamW's moments start at zero)."""
    if config.optimizer == "sgd":
        return SGDAscent(model.parameters(), config.lr)
    if config.optimizer == "adamw":
        return AdamWAscent(model.parameters(), config.lr, config.weight_decay, config.max_grad_norm)
    raise ValueError(f"unknown optimizer {config.optimizer!r}; choose sgd or adamw")


@torch.no_grad()
def expected_reward(pool: PromptPool, n_samples: int, sampler: HFSampler, seed: int = 0) -> float:
    """Monte Carlo E_x E_y G = mean over prompts and n_samples fixed-stream samples of the reward (with a greedy
    sampler and n_samples = 1: the greedy accuracy)."""
    indices = list(range(len(pool)))
    groups = draw_groups(pool, indices, n_samples, sampler, (STREAM_EVAL, seed))
    return float(group_rewards(pool, indices, groups).mean())


class MonteCarloValue:
    """Noisy oracle: V(x) ~ mean reward of n_v fresh samples at the current policy (independent of the K)."""

    def __init__(self, n_v: int, sampler: HFSampler):
        self.n_v, self.sampler = n_v, sampler

    def __call__(self, pool: PromptPool, indices: list[int], key: tuple[int, ...]) -> torch.Tensor:
        """[B] V_hat(x) = (1/n_v) sum_j G(y_j), y_j ~ pi_theta(. | x) on stream STREAM_VALUE."""
        groups = draw_groups(pool, indices, self.n_v, self.sampler, (STREAM_VALUE, *key))
        return group_rewards(pool, indices, groups).mean(-1)

    def observe(self, indices: list[int], rewards: torch.Tensor) -> None:
        """Nothing to remember."""


class RunningValue:
    """Held-out running estimate: per-prompt EMA v <- (1 - a) v + a mean(G) of earlier visits only."""

    def __init__(self, alpha: float = 0.5, prior: float = 0.5):
        self.alpha, self.global_value, self.values = alpha, prior, {}

    def __call__(self, pool: PromptPool, indices: list[int], key: tuple[int, ...]) -> torch.Tensor:
        """[B] stored V of each prompt (the global EMA for prompts not seen yet)."""
        return torch.tensor([self.values.get(i, self.global_value) for i in indices], dtype=torch.float64)

    def observe(self, indices: list[int], rewards: torch.Tensor) -> None:
        """v_x <- (1 - a) v_x + a mean_k G_k, after the step that used the old v_x."""
        for index, mean in zip(indices, rewards.mean(-1).tolist()):
            self.values[index] = (1 - self.alpha) * self.values.get(index, self.global_value) + self.alpha * mean
        self.global_value = (1 - self.alpha) * self.global_value + self.alpha * float(rewards.mean())


def make_baseline(config: SimulationConfig, sampler: HFSampler):
    """The V stand-in of the oracle estimator: MonteCarloValue(n_v) or RunningValue()."""
    if config.oracle == "mc":
        return MonteCarloValue(config.n_v, sampler)
    if config.oracle == "running":
        return RunningValue()
    raise ValueError(f"unknown oracle {config.oracle!r}; choose mc or running")
