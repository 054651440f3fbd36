"""Settings of the Algorithm-1 simulation (studies.simulation.run); every field is a flag of
scripts/simulate_algorithm1.py. Importing this module is cheap (no torch), so ``--help`` is fast."""

from __future__ import annotations

from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.gradients.estimators import GRPO, ORACLE, UNBIASED, VANILLA

OPTIMIZERS = ("sgd", "adamw")
ADAMW = {"weight_decay": 0.01, "max_grad_norm": 1.0}  # defaults of the AdamW-only settings (the TRL backend's)


@dataclass
class SimulationConfig(Flags):
    """Settings of the sweep over K (at fixed budget N = B K), seeds and estimators, and of the arithmetic task."""

    model: str = option("assets/tiny_policy", help="local model folder or hub id")
    budget: int = option(64, minimum=1, help="N = B*K sequences per step")
    K_list: tuple[int, ...] = option((2, 4, 8, 16, 32), minimum=2, help="group sizes (each divides --budget)")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, help="run seeds")
    estimators: tuple[str, ...] = option((VANILLA, GRPO, ORACLE), choices=UNBIASED, help="gradient estimators compared")
    steps: int = option(30, minimum=1, help="update steps per run")
    lr: float = option(1e-3, above=0, help="learning rate")
    optimizer: str = option(
        "sgd",
        choices=OPTIMIZERS,
        help="sgd: theta += lr g_hat (the paper's Algorithm 1); adamw: torch AdamW (betas 0.9/0.999, eps 1e-8) "
        "minimising -g_hat's surrogate, as the TRL backend",
    )
    weight_decay: float = option(
        ADAMW["weight_decay"], minimum=0, help="AdamW's decoupled weight decay (adamw only; TRL backend: 0.01)"
    )
    max_grad_norm: float = option(
        ADAMW["max_grad_norm"],
        minimum=0,
        help="clip the norm of g_hat to this before each AdamW step (adamw only; 0: no clipping)",
    )
    oracle: str = option(
        "mc",
        choices=("mc", "running"),
        help="V stand-in of oracleV: n_v fresh samples (mc) or a running per-prompt average",
    )
    n_v: int = option(8, minimum=1, help="extra samples per prompt for V")
    eval_every: int = option(0, minimum=0, help="held-out evaluation every n steps (0: at the end only)")
    train_prompts: int = option(256, minimum=1, help="training prompts")
    train_seed: int = option(1000, help="seed of the training prompts")
    heldout_prompts: int = option(64, minimum=1, help="held-out prompts")
    heldout_seed: int = option(2000, help="seed of the held-out prompts")
    heldout_samples: int = option(16, minimum=1, help="samples per held-out prompt")
    heldout_greedy: bool = option(
        False,
        help="held-out metric: greedy accuracy (one greedy continuation per prompt, as the TRL validation) "
        "instead of the expected reward over --heldout_samples samples",
    )
    style: str = option("zero_shot", choices=("zero_shot", "few_shot"), help="prompt style")
    temperature: float = option(1.0, above=0, help="sampling temperature")
    top_p: float = option(1.0, above=0, maximum=1, help="nucleus mass")
    max_new_tokens: int = option(8, minimum=1, help="tokens per continuation")

    def __post_init__(self) -> None:
        self.K_list, self.seeds = tuple(self.K_list), tuple(self.seeds)
        self.estimators = tuple(self.estimators)
        super().__post_init__()  # choices and bounds
        self.K_list = tuple(cli.unique(list(self.K_list), "--K_list"))
        self.seeds = tuple(cli.unique(list(self.seeds), "--seeds"))
        self.estimators = tuple(cli.unique(list(self.estimators), "--estimators"))
        bad = [k for k in self.K_list if self.budget % k]
        require(not bad, f"every K must divide --budget {self.budget} (not {' '.join(map(str, bad))})")
        adamw_only = [f"--{name}" for name in ("weight_decay", "max_grad_norm") if getattr(self, name) != ADAMW[name]]
        require(
            self.optimizer == "adamw" or not adamw_only,
            f"{' and '.join(adamw_only)} apply to --optimizer adamw only (plain SGD has neither)",
        )

    def batch(self, K: int) -> int:
        """B = N / K (N must be a multiple of K)."""
        if K < 2 or self.budget % K:
            raise ValueError(f"K={K} must be >= 2 and divide the budget N={self.budget}")
        return self.budget // K
