"""CUDA's device rule emulated on a CPU (docs/gpu.md, "A tensor left on the CPU"): tensors on the ``meta`` device
stand for the GPU's, and ``DeviceRule`` refuses an op whose tensors sit on two devices, as CUDA does.

Meta alone refuses most mixes (elementwise ops, cat, index_add) but accepts some that CUDA refuses: gather or
scatter_ with a CPU index, an embedding of CPU ids, repeat_interleave with CPU repeats, a CPU value assigned into
a meta tensor at an advanced index. The mode checks every op: all its tensor arguments on one device, except
  - a 0-dim CPU tensor read as an input (CUDA takes it as a scalar; written in place, it is refused),
  - the index of ``t[index]`` and ``t[index] = value`` (CUDA moves a CPU index; the value must be on t's device),
  - the moves themselves (``.to``, ``.cpu``, ``copy_``, ``torch.tensor``, ``torch.as_tensor``).
A meta tensor has no values, so its move to the host (``.to("cpu")``, ``.cpu()``) gives zeros of its shape and
dtype: what reaches the host is checked for device and shape, never for values. The one op whose output size
depends on values, ``repeat_interleave`` with tensor repeats (CUDA reads them back), gets its size from the host
data the repeats were built from (``torch.tensor(data, device=...)``, ``as_tensor`` or ``.to`` of a CPU tensor).

``TinyMetaLM`` is a language model small enough to read, with what ``grpo_mse.policy.logprobs`` uses of a HF model
(``parameters()``, ``config._attn_implementation``, ``get_output_embeddings()``, a forward with
``input_ids, attention_mask, position_ids, past_key_values, use_cache, logits_to_keep`` returning ``.logits`` and
``.past_key_values`` with ``batch_repeat_interleave``); every input enters an op with its weights or activations,
so an input left on the CPU is refused under the rule. On the CPU it computes real values (its attention honours
the 2D, boolean 4D and additive 4D masks), which is how its tests check it is a faithful model.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

GPU = torch.device("meta")  # the device standing for a CUDA GPU

MOVES = frozenset({torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.copy_, torch.tensor, torch.as_tensor})


IN_PLACE_OPERATORS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__iand__", "__ior__"})


class MixedDevices(RuntimeError):
    """An op CUDA would refuse: tensor arguments on two devices."""


class DeviceRule(TorchFunctionMode):
    """Within ``with DeviceRule():`` an op mixing devices raises ``MixedDevices`` (module docstring)."""

    def __init__(self):
        super().__init__()
        self.host_values = WeakTensorKeyDictionary()  # meta tensor -> the CPU values it was built from

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        host = host_copy(func, args, kwargs)
        if host is not None:
            return host
        tensors = operands(func, args, kwargs)
        first_read = 1 if in_place(func) else 0  # CUDA takes CPU scalars as inputs only, never as outputs
        devices = {
            t.device for i, t in enumerate(tensors) if not (i >= first_read and t.dim() == 0 and t.device.type == "cpu")
        }
        if len(devices) > 1:
            name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
            raise MixedDevices(f"{name}: tensors on {sorted(str(d) for d in devices)} (CUDA refuses this mix)")
        if func is torch.repeat_interleave and len(args) > 1 and "output_size" not in kwargs:
            repeats = args[1]
            if isinstance(repeats, torch.Tensor) and repeats.is_meta and repeats.dim() > 0:
                kwargs = {**kwargs, "output_size": int(self.host_values[repeats].sum())}
        result = func(*args, **kwargs)
        if func in MOVES and isinstance(result, torch.Tensor) and result.is_meta:
            self.remember(func, args, kwargs, result)
        return result

    def remember(self, func, args: tuple, kwargs: dict, result: torch.Tensor) -> None:
        """Keep the host values a meta tensor was made from (none when it came from another meta tensor)."""
        if func in (torch.tensor, torch.as_tensor):
            source = args[0]
            if not (isinstance(source, torch.Tensor) and source.is_meta):
                self.host_values[result] = func(source, dtype=result.dtype)
        elif func is torch.Tensor.to and args[0].device.type == "cpu":
            self.host_values[result] = args[0].to(result.dtype)


def operands(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors of one call that must share a device."""
    if func in MOVES:
        return []
    if func is torch.Tensor.__getitem__:
        return [args[0]]
    if func is torch.Tensor.__setitem__:
        return [a for a in (args[0], args[2]) if isinstance(a, torch.Tensor)]
    leaves, _ = tree_flatten((args, kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def in_place(func) -> bool:
    """Whether ``func`` writes into its first argument (``add_``, ``+=``)."""
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name in IN_PLACE_OPERATORS


def host_copy(func, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """Zeros on the CPU for a meta tensor moved to the host (meta has no data to copy); None for any other call."""
    if func not in (torch.Tensor.to, torch.Tensor.cpu) or not args[0].is_meta:
        return None
    if func is torch.Tensor.cpu:
        device, dtype = torch.device("cpu"), None
    else:
        rest = {key: value for key, value in kwargs.items() if key != "copy"}
        device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **rest)
    if device is None or device.type != "cpu":
        return None
    return torch.zeros(args[0].shape, dtype=dtype or args[0].dtype)


class TinyCache:
    """The keys of the tokens seen so far ([batch, length, width]): what ``cached_prompt_logprobs`` uses of a cache."""

    def __init__(self, keys: torch.Tensor):
        self.keys = keys

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.keys = self.keys.repeat_interleave(repeats, dim=0)


class TinyMetaLM(torch.nn.Module):
    """One attention layer over token plus position embeddings, keys = values = the embeddings, then a linear head."""

    def __init__(self, attention: str = "sdpa", device: torch.device | str = GPU, vocab: int = 11, width: int = 4):
        super().__init__()
        self.config = SimpleNamespace(_attn_implementation=attention)
        self.tokens = torch.nn.Embedding(vocab, width, device=device)
        self.places = torch.nn.Embedding(64, width, device=device)
        self.head = torch.nn.Linear(width, vocab, bias=False, device=device)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head

    def forward(
        self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False, logits_to_keep=0
    ):
        batch, length = input_ids.shape
        past = 0 if past_key_values is None else past_key_values.keys.shape[1]
        if position_ids is None:  # HF's default: the positions after the cache
            position_ids = torch.arange(past, past + length, device=self.head.weight.device).expand(batch, -1)
        hidden = self.tokens(input_ids) + self.places(position_ids)
        keys = hidden if past_key_values is None else torch.cat([past_key_values.keys, hidden], dim=1)
        scores = hidden @ keys.transpose(1, 2)  # [batch, length, past + length]
        scores = self.masked(scores, attention_mask, past)
        out = torch.softmax(scores, dim=-1) @ keys
        logits = self.head(out[:, -logits_to_keep:] if logits_to_keep else out)
        return SimpleNamespace(logits=logits, past_key_values=TinyCache(keys) if use_cache else None)

    def masked(self, scores: torch.Tensor, attention_mask, past: int) -> torch.Tensor:
        """Scores with HF's mask conventions: a 4D mask is the whole mask (boolean for sdpa, additive for eager);
        a 2D 0/1 mask of the keys is combined with the causal one."""
        if attention_mask is not None and attention_mask.dim() == 4:
            if self.config._attn_implementation == "eager":
                return scores + attention_mask[:, 0]
            return scores.masked_fill(~attention_mask[:, 0], float("-inf"))
        length, total = scores.shape[1], scores.shape[2]
        allowed = torch.ones((length, total), dtype=torch.bool, device=scores.device).tril(past)[None]
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, :]
        return scores.masked_fill(~allowed, float("-inf"))
