"""The statistics engines (``--engine``): how a prompt's M groups become each estimator's trace statistics.

The registry ``ENGINES`` maps a name (a choice of ``--engine``, saved in the run's config) to "module:attribute",
imported only when a run uses it (this module imports no torch: ``--help`` reads the names from here). The
attribute is a ``TraceEngine``. Each engine is one file of this folder:

- ``fast``: at most two vector-Jacobian products per group, several groups per batched backward call, float32
  running sums and float64 Gram scalars (``fast.py``; docs/engines.md);
- ``reference``: the original algorithm, one backward pass per estimator and Welford statistics (``reference.py``);
- ``sketched``: the fast engine's gradient rows, one at a time, each through one seeded count sketch of
  ``sketch_dim`` coordinates; float64 Welford statistics of the sketched vectors, R independent blocks' own estimates
  beside them (``sketched.py``; ``gradients.sketch``; docs/engines.md).

The interface (everything a run knows of an engine):

- It receives (``TraceEngine.accumulate(work, settings, pool)``) the prompt's ``gradients.engine.PromptWork``:
  ``logprob_fn(continuations) -> [n]`` log-probabilities with grad, the trainable ``params``, the M ``groups`` of K
  continuations (token lists), their ``rewards`` [M, K], the statistics' ``labels`` and ``weights(group_rewards) ->
  {label: w [K]}``, the estimators' weights (and their differences from the oracle's for the biases, and 1/K for the
  score) of one group; the run's ``EngineSettings``; the run's ``statistics.BufferPool`` (or None), from which
  model-sized buffers may be taken and to which ``release`` gives them back.
- It returns {label: accumulator}, one accumulator per label, each holding the M vectors
  x_g = sum_k w_k grad lp_k of its label (one per group, in any order, a vector whose weights are all 0 included).
- An accumulator is a ``gradients.statistics.Accumulator``: ``count`` (vectors added), ``trace()`` (the trace of
  their sample covariance, denominator M - 1), ``mean()`` (their mean, one tensor per parameter), and three methods
  with defaults an engine may override for speed or memory: ``mean_square()`` (||mean||^2, float64),
  ``kept_mean(alone)`` (the mean as a (vector, scale) pair a keeper owns afterwards: the advisor's c1 batch) and
  ``release()`` (buffers back to the pool).
- ``gradients.engine.prompt_traces`` turns the accumulators into the prompt's ``PromptStats`` (traces, squared
  biases, score statistics, the accumulators themselves); the run and the advisor's hook read accumulators only
  through the methods above.

A new engine is one file here with a module-level ``TraceEngine`` plus one entry in ``ENGINES``
(docs/engines.md, "Add an engine"; tests/gradients/test_engine_registry.py writes one in a test).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

# name -> "module:attribute" (a TraceEngine); the config's --engine choices are this dict's keys
ENGINES: dict[str, str] = {
    "fast": "grpo_mse.gradients.trace_engines.fast:ENGINE",
    "reference": "grpo_mse.gradients.trace_engines.reference:ENGINE",
    "sketched": "grpo_mse.gradients.trace_engines.sketched:ENGINE",
}
DEFAULT = "fast"


class TraceEngine(NamedTuple):
    """One statistics engine: ``accumulate(work, settings, pool) -> {label: Accumulator}`` (the interface above);
    ``shared_prompt``: its log-probabilities may come from the shared-prompt path (the prompt run once per group,
    ``policy.logprobs.shared_prompt_logprobs``), else the prompt is run once per sequence, as the original does."""

    accumulate: Callable
    shared_prompt: bool = True


@dataclass(frozen=True)
class EngineSettings:
    """How a run's statistics are computed: the engine's name (a key of ``ENGINES``) and the settings engines read.

    ``groups_per_pass`` (``--groups_per_pass``; 0: auto): groups per forward pass and batched backward call;
    ``keep_rows`` (the memory plan's kept rows; 0: none): model-sized gradient rows that go to the statistics
    together; ``measure_score``: also accumulate the group-mean score s_g = (1/K) sum_k grad lp_k (||E s||^2,
    tr Cov s_g), asked per prompt. ``sketch_dim``, ``sketch_blocks``, ``sketch_seed``: the sketched engine's count
    sketch (``gradients.sketch.SketchSpec``; the other engines ignore them)."""

    name: str = DEFAULT
    groups_per_pass: int = 0
    keep_rows: int = 0
    measure_score: bool = False
    sketch_dim: int = 1 << 20
    sketch_blocks: int = 4
    sketch_seed: int = 0


def load(name: str) -> TraceEngine:
    """The engine registered as ``name`` (its module imported now); ValueError naming the choices otherwise."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    module, attribute = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), attribute)
