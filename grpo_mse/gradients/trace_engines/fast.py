"""The fast engine (``--engine fast``, the default): at most two vector-Jacobian products per group, several groups
per batched backward call, float32 running sums and float64 Gram scalars (docs/engines.md).

Every estimator here is affine in the rewards within a group, w_k = (reward_coef G_k + score_coef) / K,
so its gradient is x = reward_coef a + score_coef s with a = grad (1/K) sum_k G_k lp_k and
s = grad (1/K) sum_k lp_k. A pass takes several groups (``pass_slices``) through one forward pass over their
distinct continuations and one batched backward call (``is_grads_batched``) that returns a and s of every group in
it (only those some estimator uses: ``group_plan``); with one group per pass (large models) a and s come from two
plain backward passes. Each label's statistics are a ``statistics.SumTrace``, fed a pass at a time (``add_pass``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from grpo_mse.gradients.engine import PromptWork, gradient
from grpo_mse.gradients.memory import groups_per_pass
from grpo_mse.gradients.statistics import BufferPool, SumTrace, gram64, model_sized
from grpo_mse.gradients.trace_engines import EngineSettings, TraceEngine


def affine_coefficients(weights: torch.Tensor, rewards: torch.Tensor) -> tuple[float, float]:
    """(reward_coef, score_coef) with K w_k = reward_coef G_k + score_coef for every k; raises if the weights
    are not affine in G."""
    k = rewards.shape[-1]
    scaled, g = (k * weights).double(), rewards.double()
    high, low = int(g.argmax()), int(g.argmin())
    if g[high] > g[low]:
        reward_coef = float((scaled[high] - scaled[low]) / (g[high] - g[low]))
        score_coef = float(scaled[low] - reward_coef * g[low])
    else:
        reward_coef, score_coef = 0.0, float(scaled[0])
    if not torch.allclose(scaled, reward_coef * g + score_coef, rtol=1e-9, atol=1e-12):
        raise ValueError("estimator weights are not affine in the rewards within a group")
    return reward_coef, score_coef


@dataclass
class RowGradients:
    """Gradient rows v_b = grad <cotangent_b, lp> (one tensor per parameter each); ``stacked`` holds
    them as [B, *shape] per parameter when they came from one batched call."""

    rows: list[list[torch.Tensor]]
    stacked: list[torch.Tensor] | None = None


def lacks_vmap_rule(error: RuntimeError) -> bool:
    """True for PyTorch's "no batching rule" error of a vmapped backward (the one case with a plain fallback)."""
    text = str(error).lower()
    return "batching rule" in text or text.startswith("vmap:")


def row_vjps(output: torch.Tensor, params: list[torch.Tensor], cotangents: torch.Tensor, batched: bool) -> RowGradients:
    """Rows grad <cotangents[b], output>: one batched backward call (``is_grads_batched``, a vmap) when
    ``batched``, else one backward pass per row (also the fallback for an operation without a vmap rule).

    Batching pays when per-call overhead dominates (small models, several groups per pass); for large
    models a vmapped backward is slower than plain passes (CPU, Qwen2.5-0.5B shapes: 11.7 s vs 9.3 s)."""
    count = len(cotangents)
    if batched and count > 1:
        try:
            grads = torch.autograd.grad(
                output, params, grad_outputs=cotangents, is_grads_batched=True, allow_unused=True
            )
        except RuntimeError as error:
            if isinstance(error, torch.OutOfMemoryError):
                raise torch.OutOfMemoryError(
                    f"{str(error).splitlines()[0]} (batched backward of {count} rows; lower --groups_per_pass, e.g. 1)"
                ) from error
            if not lacks_vmap_rule(error):
                raise
        else:
            stacked = [
                torch.zeros((count, *p.shape), dtype=p.dtype, device=p.device) if g is None else g
                for g, p in zip(grads, params)
            ]
            return RowGradients([[g[b] for g in stacked] for b in range(count)], stacked)
    return RowGradients(
        [gradient((row * output).sum(), params, retain=index < count - 1) for index, row in enumerate(cotangents)]
    )


# Continuation tokens one pass may hold, and (rows x tokens) for its batched backward call, whose
# intermediate gradients carry one copy per cotangent row (2 rows per group at most).
PASS_TOKEN_BUDGET = 4096
PASS_ROW_TOKEN_BUDGET = 1 << 16


def pass_slices(
    groups: list[list[list[int]]],
    step: int,
    token_budget: int = PASS_TOKEN_BUDGET,
    row_token_budget: int = PASS_ROW_TOKEN_BUDGET,
) -> list[slice]:
    """Consecutive runs of at most ``step`` groups, ``token_budget`` continuation tokens and
    ``row_token_budget`` (2 rows per group) x tokens; always at least one group."""
    slices, start, tokens = [], 0, 0
    for index, group in enumerate(groups):
        size = sum(len(c) for c in group)
        count = index - start
        if count and (
            count == step or tokens + size > token_budget or 2 * (count + 1) * (tokens + size) > row_token_budget
        ):
            slices.append(slice(start, index))
            start, tokens = index, 0
        tokens += size
    return slices + [slice(start, len(groups))] if groups else slices


def group_plan(weights: dict[str, torch.Tensor], rewards: torch.Tensor) -> tuple[list[str], dict[str, list[float]]]:
    """Which of a, s a group needs, and each estimator's coefficients on them: x = reward_coef a + score_coef s.

    With equal rewards a = G_1 s, so x = (score_coef + reward_coef G_1) s; a vector whose coefficient is 0 for
    every estimator is not computed (e.g. all rewards 0 with V = 0: every estimator is exactly 0)."""
    equal = bool(rewards.max() == rewards.min())
    pairs = {name: affine_coefficients(w, rewards) for name, w in weights.items()}
    if equal:
        folded = {
            name: [score_coef + reward_coef * float(rewards[0])] for name, (reward_coef, score_coef) in pairs.items()
        }
        return (["s"], folded) if any(c[0] != 0.0 for c in folded.values()) else ([], {n: [] for n in pairs})
    kinds = [kind for index, kind in enumerate("as") if any(pair[index] != 0.0 for pair in pairs.values())]
    return kinds, {name: [pair["as".index(kind)] for kind in kinds] for name, pair in pairs.items()}


def group_cotangents(rewards: torch.Tensor, kinds: list[list[str]]) -> tuple[torch.Tensor, list[list[int]]]:
    """Rows a_g = G_g / K and s_g = 1 / K on group g's slice ([C, K] rewards -> [B, C K]) for the
    kinds each group needs; returns the rows and each group's row indices."""
    count, k = rewards.shape
    rows, owner = [], []
    for g, (group_rewards, group_kinds) in enumerate(zip(rewards, kinds)):
        owner.append(list(range(len(rows), len(rows) + len(group_kinds))))
        for kind in group_kinds:
            row = torch.zeros(count * k, dtype=rewards.dtype)
            row[g * k : (g + 1) * k] = (group_rewards if kind == "a" else torch.ones_like(group_rewards)) / k
            rows.append(row)
    return (torch.stack(rows) if rows else torch.zeros((0, count * k), dtype=rewards.dtype)), owner


def distinct_continuations(
    continuations: list[list[int]], cotangents: torch.Tensor
) -> tuple[list[list[int]], torch.Tensor]:
    """Each distinct continuation once, with the cotangent columns of its copies summed:
    sum_n c_bn grad lp_n = sum_u (sum_{n: y_n = y_u} c_bn) grad lp_u, since lp depends on the tokens only."""
    first: dict[tuple[int, ...], int] = {}
    column = torch.tensor([first.setdefault(tuple(c), len(first)) for c in continuations])
    unique = [list(tokens) for tokens in first]
    merged = torch.zeros((len(cotangents), len(unique)), dtype=cotangents.dtype)
    return unique, merged.index_add_(1, column, cotangents)


def add_pass(
    stats: dict[str, SumTrace], labels: list[str], plans, owner: list[list[int]], rows, defer: bool = False
) -> None:
    """Add one pass's groups to every estimator's statistics: group g's vector is sum_j c_j rows[owner[g][j]],
    scalars from one float64 Gram matrix of the rows and the running sums (once those are nonzero).
    ``defer``: a first pass leaves each running sum as its rows' terms (``SumTrace.add_pass``).

    At model sizes (>= PARTIAL_GRAM_MIN coordinates) a running sum that is still exactly zero (every coefficient
    so far 0, e.g. GRPO while all groups had equal rewards) is left out of the Gram matrix (its scalars are 0)
    instead of being allocated as model-sized zeros and copied to float64."""
    counted = bool(stats[labels[0]].count)
    large = model_sized(stats[labels[0]].shapes_like)
    present = [name for name in labels if counted and (not large or stats[name].held)]
    vectors = rows + [stats[name].total for name in present]
    empty = torch.zeros((0, 0), dtype=torch.float64)
    gram = gram64(vectors, rows=len(rows) if large else None).cpu() if vectors else empty
    n = len(rows)
    for name in labels:
        coefficients = torch.zeros((len(owner), n), dtype=torch.float64)
        for g, ((_, group_coefficients), own) in enumerate(zip(plans, owner)):
            coefficients[g, own] = torch.tensor(group_coefficients[name], dtype=torch.float64)
        if name in present:
            t = n + present.index(name)
            stats[name].add_pass(coefficients, rows, gram[:n, :n], gram[t, :n], float(gram[t, t]))
        else:  # no earlier vectors, or (model sizes) a running sum that is exactly zero
            zeros = torch.zeros(n, dtype=torch.float64)
            stats[name].add_pass(coefficients, rows, gram[:n, :n], zeros, 0.0, defer=defer)


@dataclass
class KeptRows:
    """Gradient rows of one or more passes waiting for the statistics, with their groups' plans and row indices."""

    rows: list = field(default_factory=list)
    plans: list = field(default_factory=list)
    owner: list[list[int]] = field(default_factory=list)

    def add(self, plans, owner: list[list[int]], rows) -> None:
        self.owner += [[len(self.rows) + index for index in own] for own in owner]
        self.plans += plans
        self.rows += rows

    def take(self) -> tuple[list, list[list[int]], list]:
        """(plans, owner, rows) as ``add_pass`` takes them; the keeper is empty afterwards."""
        taken = self.plans, self.owner, self.rows
        self.plans, self.owner, self.rows = [], [], []
        return taken


def splits_by_reward(plans, rewards: torch.Tensor) -> bool:
    """Whether a pass is one group that needs both a and s and has exactly two distinct rewards (binary
    rewards, not all equal): ``reward_split_rows`` then gets the same two vectors for half the backward work."""
    return len(plans) == 1 and plans[0][0] == ["a", "s"] and len(set(rewards[0].tolist())) == 2


def reward_split_rows(
    logprob_fn, params: list[torch.Tensor], group: list[list[int]], rewards: torch.Tensor, plan, gradient_of=None
) -> tuple[list, list]:
    """One group's gradient rows as w_r = (1/K) sum_{k: G_k = r} grad lp_k, one forward and one backward pass
    per reward value r over its own continuations only (each sequence goes through one backward pass, where
    computing a and s from one pass over all K costs two full backward passes). Since a = sum_r r w_r and
    s = sum_r w_r, an estimator x = c_a a + c_s s is sum_r (c_a r + c_s) w_r: returns the rows and the plan
    with those coefficients. ``gradient_of(output, params, retain)``: how a row is made (default: the gradient
    itself; the sketched engine's makes its sketch, so no whole row exists)."""
    kinds, coefficients = plan
    gradient_of = gradient_of or gradient  # looked up at the call (tests count this module's gradient calls)
    k, values = len(group), sorted(set(rewards.tolist()))
    rows = []
    for value in values:
        members = [tokens for tokens, reward in zip(group, rewards.tolist()) if reward == value]
        unique, weights = distinct_continuations(members, torch.full((1, len(members)), 1.0 / k, dtype=torch.float64))
        logprobs = logprob_fn(unique)
        rows.append(
            gradient_of((weights[0].to(logprobs.device, logprobs.dtype) * logprobs).sum(), params, retain=False)
        )
    split = {name: [c[0] * value + c[1] for value in values] for name, c in coefficients.items()}
    return rows, [(kinds, split)]


def accumulate(work: PromptWork, settings: EngineSettings, pool: BufferPool | None = None) -> dict[str, SumTrace]:
    """Every label's running sums over the prompt's groups, ``settings.groups_per_pass`` groups a pass (0: auto;
    fewer when over ``PASS_TOKEN_BUDGET`` or ``PASS_ROW_TOKEN_BUDGET``, see ``pass_slices``); the sums take their
    buffers from ``pool`` (``SumTrace.release`` hands them back).

    ``settings.keep_rows`` (model sizes, ``statistics.model_sized``): the gradient rows of several passes, up to this
    many, go to the statistics together. Per pass, the statistics read every running sum twice (the Gram matrix,
    the additions) and that dominates a 135M-parameter model's run on a CPU; one Gram matrix of all of a prompt's
    rows reads each row once, and the running sums are then formed only when read (c1's oracle mean). 0: a pass's
    rows at once (the built-in policies keep their bits)."""
    params, groups, rewards, labels = work.params, work.groups, work.rewards, work.labels
    stats = {label: SumTrace(params, pool) for label in labels}
    k, count = rewards.shape[1], sum(p.numel() for p in params)
    keep = settings.keep_rows if model_sized(params) else 0
    kept = KeptRows()
    for chunk in pass_slices(groups, groups_per_pass(k, count, settings.groups_per_pass)):
        chunk_rewards = rewards[chunk].to(torch.float64)
        plans = [group_plan(work.weights(group_rewards), group_rewards) for group_rewards in chunk_rewards]
        cotangents, owner = group_cotangents(chunk_rewards, [kinds for kinds, _ in plans])
        rows = []
        if splits_by_reward(plans, chunk_rewards):  # one group, two reward values: half-size backward passes
            rows, plans = reward_split_rows(work.logprob_fn, params, groups[chunk][0], chunk_rewards[0], plans[0])
        elif len(cotangents):  # otherwise every estimator is exactly 0 for these groups: no pass at all
            unique, cotangents = distinct_continuations([c for group in groups[chunk] for c in group], cotangents)
            logprobs = work.logprob_fn(unique)
            rows = row_vjps(logprobs, params, cotangents.to(logprobs.device, logprobs.dtype), len(owner) > 1).rows
        if kept.plans and len(kept.rows) + len(rows) > keep:  # no room for this pass's rows: the kept go first
            add_pass(stats, labels, *kept.take())
        kept.add(plans, owner, rows)
        if not keep:
            add_pass(stats, labels, *kept.take())
    if kept.plans:  # the prompt's last kept rows; a prompt whose rows all fit defers its running sums
        add_pass(stats, labels, *kept.take(), defer=True)
    return stats


ENGINE = TraceEngine(accumulate, shared_prompt=True)
