"""Sampling with vLLM's offline API (GPU only; vLLM is imported only when ``--backend vllm`` is asked).

Same interface as ``sampling.HFSampler`` (``settings``, ``iter_samples``, ``sample``): per request, the continuation
token ids with a sampled EOS kept at the end. Each request carries its own seed, stream_seed(*key), so no two
prompts share a random stream. Log-probabilities for gradients are always recomputed by the HF model.
This module imports neither torch nor vLLM at load time; the configs refuse a backend vLLM cannot serve
(``config.gradient_evaluation.check_vllm``) before any work.
"""

from __future__ import annotations


def make_vllm(config, model, settings, batch_size: int = 1, requests_per_call: int = 1):
    """--backend vllm's factory (``policy.sampler_backends.SAMPLERS``): a VLLMSampler (``config``: a ModelConfig;
    ``settings``: the run's ``sampling.SamplingSettings``; ``requests_per_call`` prompts per call of vLLM's ``LLM``;
    vLLM loads its own copy of the weights, so ``model`` and ``batch_size`` are not used)."""
    from grpo_mse.policy.loading import model_folder

    return VLLMSampler(
        model_folder(config.model_source),  # a GGUF file or an adapter: the HF folder the gradients' model loads too
        config.dtype,
        config.seed,
        settings,
        config.vllm_gpu_util,
        config.trust_remote_code,
        config.revision,
        max_model_len=config.vllm_max_model_len,
        requests_per_call=requests_per_call,
        enforce_eager=config.vllm_enforce_eager,
    )


class VLLMSampler:
    """vLLM's ``LLM`` (its offline sampler) next to the training model (set ``gpu_memory_utilization`` to leave room
    for it).

    ``iter_samples`` sends ``requests_per_call`` requests to the LLM at a time and yields after each call."""

    def __init__(
        self,
        model: str,
        dtype: str,
        seed: int,
        settings,
        gpu_memory_utilization: float = 0.4,
        trust_remote_code: bool = False,
        revision: str = "main",
        max_model_len: int | None = None,
        requests_per_call: int = 1,
        enforce_eager: bool = False,
    ):
        from vllm import LLM  # not installed: one line (errors.missing_package)

        names = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
        self.settings, self.requests_per_call = settings, max(1, requests_per_call)
        self.llm = LLM(
            model=model,
            dtype=names[dtype],
            seed=seed,
            revision=revision,
            gpu_memory_utilization=gpu_memory_utilization,
            trust_remote_code=trust_remote_code,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            enable_prefix_caching=True,
        )

    def iter_samples(self, requests):
        """(request position, continuation) for every sample, in order, one LLM call at a time."""
        for first in range(0, len(requests), self.requests_per_call):
            outputs = self._generate(requests[first : first + self.requests_per_call])
            yield from ((first + offset, c) for offset, continuations in enumerate(outputs) for c in continuations)

    def sample(self, requests) -> list[list[list[int]]]:
        """For each (prompt ids, n, stream key): n continuations (token ids, EOS kept)."""
        return [
            c
            for first in range(0, len(requests), self.requests_per_call)
            for c in self._generate(requests[first : first + self.requests_per_call])
        ]

    def _generate(self, requests) -> list[list[list[int]]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from grpo_mse.policy.sampling import stream_seed

        s, eos_ids = self.settings, list(self.settings.eos_ids)
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids, _, _ in requests]
        params = [
            SamplingParams(
                n=n,
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=-1,
                max_tokens=s.max_new_tokens,
                seed=stream_seed(*key),
                stop_token_ids=eos_ids,
                skip_special_tokens=True,
            )
            for _, n, key in requests
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [
            [with_eos(list(c.token_ids), c.finish_reason, c.stop_reason, eos_ids) for c in out.outputs]
            for out in outputs
        ]


def with_eos(tokens: list[int], finish_reason: str | None, stop_reason, eos_ids: list[int]) -> list[int]:
    """Token ids of the sequence actually sampled: put back an EOS that vLLM reports but left out."""
    if finish_reason != "stop" or (tokens and tokens[-1] in eos_ids):
        return tokens
    if isinstance(stop_reason, int):
        return tokens + [stop_reason]
    if stop_reason is None:
        return tokens + [eos_ids[0]]
    return tokens  # a stop string: no token to add
