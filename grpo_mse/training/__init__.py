"""GRPO training: data preparation, launch helpers (VERL, TRL), log collection, sweeps."""
