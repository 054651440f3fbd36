"""A tracecov run's whole memory, planned before any work from a typed record of its sizes (``RunSizes``, built
once by ``TracecovConfig.run_sizes``): one pass's activations and gradient rows, the running sums, the rows a prompt
likely gives (``likely_rows``) and c1's mean gradients (``RunShape`` -> ``plan_run`` -> ``MemoryPlan``); the one-line
refusal when the essentials do not fit (``check_memory``), the hold to the plan between prompts (``hold_to_plan``)
and the measured peak beside it (``peak_line``). Importing this module is cheap (torch only inside the checks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from grpo_mse.errors import UsageError
from grpo_mse.gradients import allocator, memory
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.memory import C1_HOST_BYTES, GB, PARTIAL_GRAM_MIN, element_bytes, groups_per_pass, stats_dtype

PLAN_MARGIN = 0.9  # share of the available memory the plan fills; the rest is left to the machine
# Activations kept for one backward pass, per token: each decoder layer's saved tensors (about 16 hidden-sized and 3
# MLP-sized vectors) and the vocabulary-sized logits, their log-softmax and its gradient
HIDDEN_COPIES, MLP_COPIES, VOCAB_COPIES = 16, 3, 4
REFUSAL_FLAGS = "--M, --K_list, --max_new_tokens, --estimators, --dtype bf16 or --no_advisor"


# The sketched engine's sketch-sized vectors beside its labels' statistics (trace_engines/sketched.py): a label's
# vector and two update buffers, two sketched rows and the one being made (its blocks and their concatenation),
# and one for the allocator (measured: the built-in policy at d = 2^20 and 2^22, 0.56 and 0.98 GB peaks); and its
# two chunk buffers (gradients/sketch.py: CHUNK float32 coordinates each, at most).
SKETCH_TRANSIENTS = 8
SKETCH_BUFFERS = 2 * 4 * (1 << 22)


@dataclass(frozen=True)
class RunSizes:
    """The settings of a tracecov run that its memory depends on (``TracecovConfig.run_sizes``): the estimators,
    M, the K's, the continuations' length, the engine and its requested groups per pass (0: auto), the mean gradients
    a c1 batch holds (at most T; 0 without the advisor), the sums c1 reads of each prompt (0 without it), the cap."""

    estimators: tuple[str, ...]
    m: int
    k_list: tuple[int, ...]
    max_new_tokens: int
    engine: str = "fast"
    groups_per_pass: int = 0
    c1_batch: int = 0
    c1_reads: int = 0
    max_memory_gb: float | None = None
    sketch_dim: int = 0  # the sketched engine's d (0: another engine)


@dataclass(frozen=True)
class RunShape:
    """What a tracecov run's memory depends on: bytes of one gradient row (model dtype) and one statistics vector,
    the largest parameter tensor's bytes, labels (running sums), rows a pass and a prompt produce, activation bytes
    a pass keeps, the c1 mean gradients a batch holds and how many sums c1 reads, the engine, and whether the
    model is large enough for kept rows (``engine.PARTIAL_GRAM_MIN`` coordinates)."""

    row: int
    vector: int
    largest: int
    labels: int
    rows_per_pass: int
    rows_per_prompt: int
    activations: int
    c1_vectors: int
    c1_reads: int
    engine: str = "fast"
    large: bool = True
    rows_likely: int | None = None  # rows a run's fullest prompt most likely produces (``likely_rows``); None: all
    signs: int = 0  # the sketched engine's one int8 sign a coordinate (``sketch.CountSketch``)

    def likely(self) -> RunShape:
        """This shape with a prompt's rows at their likely number instead of their most: at least a pass's rows when
        it has any (a pass's activations and gradients whatever its rows), none at all when it likely gives none
        (V = 0 everywhere: the fast and sketched engines make no pass, engine.prompt_traces and
        sketched.sketched_rows; the reference one makes them all). The sketched engine's statistics do not depend on
        a prompt's rows, only on whether it makes a pass."""
        if self.rows_likely is None or self.engine == "reference":
            return self
        if self.rows_likely == 0:
            return replace(self, rows_per_prompt=0, rows_per_pass=0)
        return replace(self, rows_per_prompt=min(max(self.rows_likely, self.rows_per_pass), self.rows_per_prompt))

    def backward(self) -> int:
        """One pass's backward: its rows (twice for a batched call, whose intermediate gradients are alive beside the
        rows it returns; model sizes take one group a pass in plain calls), the largest parameter's gradient twice
        (a tied embedding's two dense gradients, summed) and the activations; nothing for a prompt with no pass."""
        if self.rows_per_pass == 0:
            return 0
        if self.engine == "sketched":  # no row: each parameter's gradient is sketched as autograd makes it
            return 2 * self.largest + self.activations
        batched = 1 if self.large else 2
        return batched * self.rows_per_pass * self.row + 2 * self.largest + self.activations

    def formed(self) -> int:
        """The sums c1 reads, formed from a prompt's kept rows: in the first row's own memory for one sum of rows in
        the statistics dtype, else in new vectors, bf16/fp16 rows upcast a parameter at a time beside them."""
        upcast = self.row < self.vector  # rows narrower than the statistics (bf16/fp16 model)
        if self.c1_reads == 0 or (self.c1_reads == 1 and not upcast):
            return 0
        return self.c1_reads * self.vector + (self.largest * self.vector // self.row if upcast else 0)

    def statistics(self, kept: int) -> int:
        """Peak of the statistics and gradients of one prompt with ``kept`` rows held together (engine.prompt_traces):
        all of a prompt's rows (the sums c1 reads formed in place for one sum, in a new buffer for more), or at most
        ``kept`` of them beside every label's running sum."""
        if self.engine == "sketched":  # Welford mean and M2 per label, d float64 each, and its transients
            return (2 * self.labels + SKETCH_TRANSIENTS) * self.vector + self.backward() + self.signs + SKETCH_BUFFERS
        if self.engine == "reference":  # Welford mean and M2 per label
            return 2 * self.labels * self.vector + self.backward()
        every = self.rows_per_prompt
        if self.large and kept >= every:
            return max((every - self.rows_per_pass) * self.row + self.backward(), every * self.row + self.formed())
        kept = kept if self.large else 0
        return self.labels * self.vector + max(
            kept * self.row + self.backward(), (kept + self.rows_per_pass) * self.row
        )


@dataclass(frozen=True)
class MemoryPlan:
    """The run's memory: what the process holds now (interpreter, libraries, model), what the run's essentials add
    (one prompt's gradients and statistics at the least memory), and the speed-ups chosen from what is left
    (kept rows; c1 mean gradients in memory instead of files). Bytes."""

    held: int
    essential: int
    statistics: int  # with the chosen kept rows
    kept_rows: int
    c1_in_memory: int  # c1 mean gradients kept in memory (the rest of a batch goes to files)
    c1_bytes: int
    available: int  # available beside what the process holds (below 0 under a --max_memory_gb below it)
    kind: str = "available host memory"
    c1_beside: int = 0  # bytes of them held beside a prompt's statistics (all but the batch's last one, at most)
    likely_statistics: int = -1  # ``statistics`` with a prompt's rows at their likely number (-1: the same)

    @property
    def needed(self) -> int:
        """The likely peak: a batch's last prompt beside the mean gradients before it, or the whole batch at its end."""
        typical = self.statistics if self.likely_statistics < 0 else self.likely_statistics
        return self.held + max(typical + self.c1_beside, self.c1_bytes)

    @property
    def most(self) -> int:
        """The peak when a prompt produces all its rows (every group's rewards differ)."""
        return self.held + max(self.statistics + self.c1_beside, self.c1_bytes)

    def fits(self) -> bool:
        return self.essential <= self.available

    def line(self) -> str:
        gb = 1e9
        return (
            f"memory: about {self.needed / gb:.3g} GB needed, {(self.held + self.available) / gb:.3g} GB {self.kind} "
            f"(model and libraries {self.held / gb:.3g}, gradients and statistics {self.statistics / gb:.3g} with "
            f"{self.kept_rows} rows kept, c1 {self.c1_bytes / gb:.3g} for {self.c1_in_memory} mean gradients in memory"
            + (f"; at most {self.most / gb:.3g} if every group's rewards differ)" if self.most > self.needed else ")")
        )


def plan_run(shape: RunShape, held: int, available: int, kind: str = "available host memory") -> MemoryPlan:
    """The plan for ``shape``: essentials first (the cheaper of keeping all of a prompt's rows or none), then, within
    PLAN_MARGIN of ``available``, all of a prompt's rows kept together when they fit (else as many as fit beside the
    running sums), then c1's mean gradients in memory. Speed-ups never make a run not fit."""
    every = shape.rows_per_prompt
    essential = min(shape.statistics(0), shape.statistics(every) if shape.large else shape.statistics(0))
    budget = int(PLAN_MARGIN * available)
    if not shape.large or shape.engine in ("reference", "sketched"):
        kept = 0
    elif shape.statistics(every) <= max(budget, essential):
        kept = every
    else:
        kept = max((k for k in range(every) if shape.statistics(k) <= budget), default=0)
        if shape.statistics(kept) > shape.statistics(every):  # no kept count beats keeping them all
            kept = every
    statistics = shape.statistics(kept)
    # the batch's vectors in memory sit beside the statistics of its later prompts (all but the last one when the
    # whole batch is in memory: the last prompt hands its own over); at most C1_HOST_BYTES of them, as files written
    # and read back cost seconds a prompt, not worth all the memory
    vector, batch = max(shape.vector, 1), shape.c1_vectors
    fitting = max(0, budget - statistics) // vector
    c1 = min(batch, C1_HOST_BYTES // vector, fitting + 1 if fitting + 1 >= batch else fitting)
    beside = min(c1, max(batch - 1, 0)) * shape.vector
    likely = min(shape.likely().statistics(kept), statistics)  # never above the most (no rows: sums read as zeros)
    return MemoryPlan(held, essential, statistics, kept, c1, c1 * shape.vector, available, kind, beside, likely)


def likely_rows(values: list[float], k_list: list[int], m: int, quantile: float = 0.5) -> int:
    """Gradient rows the fullest prompt of a run most likely produces: a group of K with 0/1 rewards of mean V gives
    two rows (a, s) when its rewards differ (probability 1 - V^K - (1 - V)^K) and at most one otherwise, so a
    prompt gives M + Binomial(M, that) at most; a prompt with V = 0 gives none (its rewards are all 0, and so is
    every estimator's weight: engine.group_plan). The run's fullest over its prompts and K's is at most r with
    probability prod P(its rows <= r). Returns the least r reached with ``quantile`` (0.5: the median)."""
    laws = [(0 if v <= 0.0 else m, 1.0 - min(v, 1.0) ** k - (1.0 - min(v, 1.0)) ** k) for v in values for k in k_list]

    def at_most(rows: int, least: int, p: float) -> float:  # P(least + Binomial(M, p) <= rows); none below least
        return sum(math.comb(m, j) * p**j * (1.0 - p) ** (m - j) for j in range(rows - least + 1))

    for rows in range(2 * m):
        if math.prod(at_most(rows, least, p) for least, p in laws) >= quantile:
            return rows
    return 2 * m


def hold_to_plan(plan: MemoryPlan | None, device: str) -> bool:
    """Between prompts on the CPU: when the process holds more than its plan's likely peak, hand the heap's freed
    pages back (``return_freed_memory``; True when it did). Freed pages are kept for reuse (``reuse_freed_memory``),
    but bf16 kernels' cached objects pin spots of the heap, so freed gradients fragment it and it grows past what is
    live (Qwen file, bf16: 2.76 GB free in 6,606 chunks against 0.33 GB in use after 8 new sequence shapes). A run
    within its plan pays nothing; one above it faults the pages it reuses in again."""
    if plan is None or str(device) != "cpu" or allocator.process_resident() <= plan.needed:
        return False
    return allocator.return_freed_memory()


def activation_bytes(config, prompt_tokens: int, continuation_tokens: int, element: int) -> int:
    """Activations a backward pass keeps for its prompt and continuation tokens (``config``: a transformers model
    config; 0 when it lacks the sizes): every token's decoder-layer tensors, the continuations' logits."""
    text = getattr(config, "text_config", config)
    layers, hidden = getattr(text, "num_hidden_layers", 0) or 0, getattr(text, "hidden_size", 0) or 0
    mlp, vocab = getattr(text, "intermediate_size", 0) or 0, getattr(text, "vocab_size", 0) or 0
    per_token = layers * (HIDDEN_COPIES * hidden + MLP_COPIES * mlp) * element
    return int((prompt_tokens + continuation_tokens) * per_token + continuation_tokens * VOCAB_COPIES * vocab * 4)


def run_shape(params, sizes: RunSizes, model_config=None, prompt_tokens: int = 0, values=None) -> RunShape:
    """What a run of ``sizes`` on ``params`` holds (``RunShape``). ``model_config`` and
    ``prompt_tokens`` (the longest prompt) size the activations: a pass's prompt once (the fast engine shares it)
    and its K continuations of at most --max_new_tokens. ``values`` (the prompts' V) give the rows a prompt likely
    produces (``likely_rows``; without them, all). Shapes only: ``params`` may be meta tensors."""
    biased = [name for name in sizes.estimators if name in est.BIASED]
    own = est.own_targets(sizes.estimators)  # their helper sums (engine.own_label)
    labels = len(sizes.estimators) + len(biased) + 1 + len(own)  # + the score and the own-target helper sums
    count = sum(p.numel() for p in params)
    sketched = sizes.engine == "sketched"  # one group a pass, its rows made and sketched one at a time
    passes = {
        k: 1 if sketched else min(sizes.m, groups_per_pass(k, count, sizes.groups_per_pass)) for k in sizes.k_list
    }
    per_pass = passes[min(sizes.k_list)]  # the most groups, so rows, a pass takes
    model_element = element_bytes(params[0].dtype) if params else 4
    return RunShape(
        row=count * model_element,
        vector=8 * sizes.sketch_dim if sketched else sum(p.numel() * element_bytes(stats_dtype(p)) for p in params),
        largest=max((p.numel() * model_element for p in params), default=0),
        labels=labels,
        rows_per_pass=1 if sketched else 2 * per_pass,
        rows_per_prompt=2 * sizes.m,
        # a pass's groups shrink as K grows (up to 128 sequences a pass): the fullest pass, not the most groups
        # (at the least K) times the longest groups (at the largest), which planned 4x the tiny policy's at K 4..32
        activations=max(
            activation_bytes(model_config, groups * prompt_tokens, groups * k * sizes.max_new_tokens, model_element)
            for k, groups in passes.items()
        ),
        c1_vectors=sizes.c1_batch * sizes.c1_reads,
        c1_reads=sizes.c1_reads,
        engine=sizes.engine,
        large=count >= PARTIAL_GRAM_MIN,
        rows_likely=likely_rows(values, list(sizes.k_list), sizes.m) if values else None,
        signs=count if sketched else 0,
    )


CAPPED = "allowed by --max_memory_gb"


def refusal(plan: MemoryPlan) -> str:
    """The one line a run whose essentials do not fit is refused with, naming the flags that lower them (and
    --max_memory_gb when it is the limit: it may be below what the model and libraries alone hold)."""
    held, whole = plan.held / 1e9, (plan.held + plan.available) / 1e9
    larger = "raise --max_memory_gb" if plan.kind == CAPPED else "use a larger machine"
    return (
        f"memory: about {(plan.held + plan.essential) / 1e9:.3g} GB needed at the least, {whole:.3g} GB {plan.kind} "
        f"(model and libraries {held:.3g}); too little memory: lower {REFUSAL_FLAGS}, or {larger}"
    )


def check_memory(
    params, sizes: RunSizes, device: str, model_config=None, prompt_tokens: int = 0, values=None
) -> MemoryPlan:
    """The run's memory plan (``plan_run`` of ``run_shape``) beside the loaded model, within what ``device`` has
    (at most --max_memory_gb with the model); UsageError (``refusal``: one line, before any file is written) when
    its essentials exceed it."""
    import torch

    shape = run_shape(params, sizes, model_config, prompt_tokens, values)
    if str(device).startswith("cuda"):
        held = int(torch.cuda.memory_allocated(torch.device(device)))
    else:
        allocator.return_freed_memory()  # what loading freed is not held
        allocator.make_resident(params)  # counted as held, not left to appear in the peak later
        held = allocator.process_resident()
    available, kind = memory.device_available(device)
    cap = sizes.max_memory_gb
    if cap is not None and held + available > cap * GB:  # other jobs keep the rest
        # below 0 when the model and libraries alone exceed the cap: the refusal then names the cap itself
        available, kind = int(cap * GB) - held, CAPPED
    plan = plan_run(shape, held, available, kind)
    if not plan.fits():
        raise UsageError(refusal(plan))
    return plan


def peak_line(plan: MemoryPlan | None, device: str) -> str:
    """One line: the run's measured peak beside its plan."""
    import torch

    if str(device).startswith("cuda"):
        peak = int(torch.cuda.max_memory_allocated(torch.device(device)))
    else:
        peak = allocator.process_peak()
    estimate = f" (estimated {plan.needed / 1e9:.3g} GB)" if plan is not None else ""
    return f"memory: peak {peak / 1e9:.3g} GB{estimate}"
