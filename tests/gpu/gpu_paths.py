"""The repository root and the shipped tiny policy, for the GPU-readiness tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "assets" / "tiny_policy")
