"""Default settings of the built-in policies' builders, importable without torch (for fast ``--help``)."""

TINY_STEPS = 2000  # training steps of assets/tiny_policy
TRAIN_BASE = "assets/tiny_policy"  # the policy that assets/train_policy starts from
TRAIN_STEPS = 300
TRAIN_LR = 1e-3
FLAW_FRACTION = 0.6  # above 1/2, so greedy decoding starts out flawed on most prompts
PAPER_STEPS = 600  # fine-tuning steps of assets/paper_policy (from assets/tiny_policy; docs/paper_regime.md)
PAPER_LR = 1e-3
PAPER_SLIP_STEPS = 1600  # slip-mixture stage (docs/paper_regime.md: first summary with >= 95% correct-or-slip answers)
PAPER_SETTLE_STEPS = 1600  # settle stage: the slip mixture, rate decaying to 0 (docs/paper_regime.md, design 3)
PAPER_LEAD_IN_WORDS = 8  # lead-in words before the answer of assets/paper_policy
