"""The benchmarks' bodies (their command lines: scripts/) and the published Qwen2.5 shapes they and the memory
plans size against (docs/engines.md)."""
