"""Published Qwen2.5 architecture shapes, for models with random weights at real sizes (benchmarks, memory
estimates on the meta device) without a download. Importing this module is cheap (transformers loads on use)."""

from __future__ import annotations

# Each model's config.json on the hub (Qwen/Qwen2.5-0.5B, -1.5B: tied input/output embeddings; -7B: untied).
QWEN2_5_SHAPES = {
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12),
    # Qwen/Qwen2.5-7B: a padded vocabulary, four key-value heads and a separate output head (untied)
    "7B": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
    # not a published model: Qwen2.5's vocabulary, tied embeddings and layer layout at a tiny width (9.9M
    # parameters, 98% of them the embedding), so that CPU checks (GPU_CHECK_EMULATE=cpu) run the same code path
    "toy": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4),
}
SHARED = dict(
    vocab_size=151936,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)


def qwen2_5_config(size: str):
    """A transformers Qwen2Config with the published shapes of Qwen2.5-``size`` ("0.5B", "1.5B", "7B" or "toy")."""
    from transformers import Qwen2Config

    return Qwen2Config(**{**SHARED, **QWEN2_5_SHAPES[size]})
