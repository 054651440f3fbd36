"""Audit the reward rules on a model's free-form answers against labels (docs/real_llm.md, "Reward audit"):
studies.audits.reward_audit (its flags: python scripts/reward_audit.py --help).
"""

from grpo_mse import cli
from studies.audits.reward_audit import main

if __name__ == "__main__":
    cli.run(main)
