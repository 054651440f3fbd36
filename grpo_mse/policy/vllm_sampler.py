"""Sampling with vLLM's offline API (GPU only; imported only when ``--backend vllm`` is asked).

Returns the same thing as the HF sampler: per request, the continuation token ids with a sampled
EOS kept at the end. Each request carries its own seed, stream_seed(seed, *key), so no two prompts
share a random stream. Log-probabilities for gradients are always recomputed by the HF model.
"""

from __future__ import annotations

from grpo_mse.policy.sampling import stream_seed


class VLLMSampler:
    """A vLLM engine next to the training model (set ``gpu_memory_utilization`` to leave room for it)."""

    def __init__(self, model: str, dtype: str, seed: int, gpu_memory_utilization: float = 0.4,
                 trust_remote_code: bool = False, revision: str = "main", max_model_len: int | None = None,
                 enforce_eager: bool = False):
        try:
            from vllm import LLM
        except ImportError:
            raise ImportError("--backend vllm needs vLLM: pip install -r requirements-gpu.txt") from None
        names = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
        self.llm = LLM(model=model, dtype=names[dtype], seed=seed, revision=revision,
                       gpu_memory_utilization=gpu_memory_utilization, trust_remote_code=trust_remote_code,
                       max_model_len=max_model_len, enforce_eager=enforce_eager, enable_prefix_caching=True)

    def sample(self, requests: list[tuple[list[int], int, tuple[int, ...]]], *, temperature: float, top_p: float,
               max_new_tokens: int, eos_ids: list[int]) -> list[list[list[int]]]:
        """For each (prompt ids, n, stream key): n continuations (token ids, EOS kept)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=ids) for ids, _, _ in requests]
        params = [SamplingParams(n=n, temperature=temperature, top_p=top_p, top_k=-1, max_tokens=max_new_tokens,
                                 seed=stream_seed(*key), stop_token_ids=eos_ids, skip_special_tokens=True)
                  for _, n, key in requests]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[with_eos(list(c.token_ids), c.finish_reason, c.stop_reason, eos_ids) for c in out.outputs]
                for out in outputs]


def with_eos(tokens: list[int], finish_reason: str | None, stop_reason, eos_ids: list[int]) -> list[int]:
    """Token ids of the sequence actually sampled: put back an EOS that vLLM reports but left out."""
    if finish_reason != "stop" or (tokens and tokens[-1] in eos_ids):
        return tokens
    if isinstance(stop_reason, int):
        return tokens + [stop_reason]
    if stop_reason is None:
        return tokens + [eos_ids[0]]
    return tokens  # a stop string: no token to add
