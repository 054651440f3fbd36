"""The sampling backends (``--backend``): a registry from a name to the factory that builds a run's sampler, imported
only when a run uses it. This module imports no torch (``--help`` reads the names from here).

A backend's factory ``function(config, model, settings, batch_size, requests_per_call)`` gets the run's ModelConfig,
the HF policy whose gradients are taken, its ``policy.sampling.SamplingSettings``, sequences per generation batch
and requests per sampler call; it returns an object with ``policy.sampling.Sampler``'s ``iter_samples`` and
``sample``. A new backend is its module (its factory function) plus one entry in ``SAMPLERS``.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple


def load(target: str):
    """The attribute a "module:attribute" string names (its module imported now)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class SamplerBackend(NamedTuple):
    """A sampling backend: ``factory`` is "module:function" (above); ``check``, if given, "module:function" of a
    check ``function(config)`` that refuses flags the backend cannot serve when the config is built (no torch yet:
    vLLM's lives with the configs, ``config.gradient_evaluation.check_vllm``)."""

    factory: str
    check: str | None = None


SAMPLERS: dict[str, SamplerBackend] = {
    "hf": SamplerBackend("grpo_mse.policy.sampling:hf_sampler"),  # our seeded sampler (CPU/GPU)
    # vLLM's offline LLM (GPU only)
    "vllm": SamplerBackend("grpo_mse.policy.vllm_sampler:make_vllm", "grpo_mse.config.gradient_evaluation:check_vllm"),
}


def make_sampler(config, model, settings, batch_size: int, requests_per_call: int = 1):
    """The sampler of ``config.backend``; the one place where a run's sampler is built."""
    return load(SAMPLERS[config.backend].factory)(config, model, settings, batch_size, requests_per_call)
