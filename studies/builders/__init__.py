"""Builders run once: the built-in tiny, training-demo and paper-regime policies (their folders are committed under
assets/), the SmolLM2 LoRA adapter and the Qwen model assembled from its PyPI parts (scripts/build_*.py,
scripts/real_llm.py)."""
