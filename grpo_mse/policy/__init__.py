"""The policy: loading a causal LM, seeded sampling (HF or vLLM), teacher-forced log-probabilities."""
