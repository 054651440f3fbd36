"""CPU GRPO training with TRL (what ``TRAINER=trl bash Policy_Optimization/grpo_train.sh`` runs).

  python -m grpo_mse.training.trl_train --model assets/tiny_policy --train_file d/train.parquet \\
      --val_file d/test.parquet --group_size 8 --budget 256 --max_steps 20

Settings mirror the VERL launcher (see grpo_mse.training.trl_backend for the mapping). Prints
VERL-style metric lines, logs to wandb when ``--loggers`` names it (``WANDB_MODE=offline`` works
with no network) and saves the final model in ``--output_dir`` unless ``--no-save_model``. Booleans
are switches (``--no-norm_adv_by_std``); the older ``--save_model 0`` / ``--norm_adv_by_std 0`` form
still works.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared CPU
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from grpo_mse import cli  # noqa: E402
from grpo_mse.errors import UsageError, require  # noqa: E402
from grpo_mse.flags import Flags, option  # noqa: E402
from grpo_mse.gradients import estimators as est  # noqa: E402
from grpo_mse.policy.model_source import check_model_path
from grpo_mse.training import adaptive_k, trl_backend  # noqa: E402
from grpo_mse.training.budget import budget_settings  # noqa: E402

LOGGERS = ("console", "wandb")


@dataclass(kw_only=True)
class TrlTrainConfig(Flags):
    """One TRL training run (the flags of ``python -m grpo_mse.training.trl_train``), checked on construction.

    Refused here, before any model is loaded: a K that does not fit the budget, a learning rate of 1 or
    more, an unknown logger, a missing data or reward file. Fewer training rows than prompts per step is
    refused once the data is read (``trl_backend.grpo_config``), still before the model is loaded.
    """

    model: str = option(help="hub id, local folder or GGUF file of the policy")
    train_file: str = option(help="VERL parquet (Policy_Optimization/prepare_data.py)")
    val_file: str = option(help="VERL parquet for held-out accuracy")
    group_size: int = option(32, minimum=2, help="K samples per prompt")
    budget: int = option(1024, minimum=2, help="sequences per step")
    seed: int = option(0, minimum=0, help="training seed")
    lr: float = option(1e-6, above=0, help="learning rate")
    max_steps: int = option(0, minimum=0, help="stop after this many steps (0: the epochs)")
    max_prompt_length: int = option(
        512,
        minimum=1,
        help="longer training prompts are dropped (counted in a warning); a longer validation one is refused",
    )
    max_response_length: int = option(512, minimum=1, help="tokens per response")
    temperature: float = option(
        1.0, above=0, help="sampling temperature of the training rollouts (validation is greedy)"
    )
    test_freq: int = option(5, minimum=1, help="validate every N steps")
    norm_adv_by_std: bool = option(
        True, zero_one=True, help="GRPO's std-normalised advantage; off: unnormalised (Dr.GRPO)"
    )
    reward_path: str = option(help="file with the reward function")
    reward_name: str = option("compute_score", help="the reward function's name in that file")
    project_name: str = option("demystifying_grpo", help="wandb project")
    experiment_name: str = option("grpo_trl", help="wandb run name")
    loggers: str = option("[console,wandb]", help="subset of [console,wandb]")
    output_dir: str = option(help="final model folder")
    save_model: bool = option(True, zero_one=True, help="save the final model in --output_dir")
    threads: int = option(0, minimum=0, help="torch threads (0: torch's choice)")
    adaptive_k_every: int = option(
        0, minimum=0, help="adaptive K: re-estimate the best K every N steps and at step 0 (0: off, a fixed K)"
    )
    adaptive_k_list: list[int] | None = option(
        None, minimum=2, help="adaptive K: the allowed K (default: the powers of two that fit --budget)"
    )
    adaptive_k_T: int = option(
        16, minimum=2, help="adaptive K: training prompts the advisor uses (a fixed random subset)"
    )
    adaptive_k_M: int = option(4, minimum=2, help="adaptive K: groups per prompt and K in the advisor")
    adaptive_k_n_oracle: int = option(64, minimum=1, help="adaptive K: samples per prompt for the advisor's V(x)")
    dry_run: bool = option(False, help="check the settings and data, build the config, exit")
    check_only: bool = option(False, help="check the flags and paths, exit (the launcher, before it writes)")

    def __post_init__(self) -> None:
        super().__post_init__()  # bounds
        try:
            budget_settings(self.group_size, self.budget)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        require(
            self.lr < 1,
            f"argument --lr: {self.lr:g} is not a learning rate for AdamW; use a value below 1 (the paper: 1e-6)",
        )
        unknown = sorted(self.logger_names - set(LOGGERS))
        require(not unknown, f"--loggers: unknown {unknown}; use console and/or wandb")
        check_model_path(self.model)  # a mistyped local folder: one line, no hub retries
        for path in (self.train_file, self.val_file, self.reward_path):
            require(os.path.isfile(path), f"{path} not found")
        if self.adaptive_k_list is not None:
            require(self.adaptive_k_every > 0, "--adaptive_k_list needs --adaptive_k_every N (N > 0: adaptive K on)")
            require(
                len(set(self.adaptive_k_list)) == len(self.adaptive_k_list),
                f"--adaptive_k_list repeats a K: {self.adaptive_k_list}",
            )
            for k in self.adaptive_k_list:
                try:
                    budget_settings(k, self.budget, k_name="--adaptive_k_list K")
                except ValueError as exc:
                    raise UsageError(str(exc)) from None
        require(
            not self.adaptive_k_every or self.allowed_k,
            f"--budget {self.budget}: no power of two fits it as a K; give --adaptive_k_list",
        )

    @property
    def allowed_k(self) -> list[int]:
        """The K adaptive K chooses from (``--adaptive_k_list``, sorted, or the powers of two that fit the budget)."""
        return sorted(self.adaptive_k_list or adaptive_k.default_k_list(self.budget))

    @property
    def logger_names(self) -> set[str]:
        """``--loggers`` as a set of names (``"[console,wandb]"`` -> {"console", "wandb"})."""
        return {x.strip() for x in self.loggers.strip("[]").split(",") if x.strip()}


def parse_args(argv=None) -> TrlTrainConfig:
    """The run's settings from the command line (flags are TrlTrainConfig's fields)."""
    return TrlTrainConfig.from_argv(argv, description=__doc__)


class RunLogger:
    """Console lines and the wandb run, one record per VERL step."""

    def __init__(self, args, config: dict):
        self.console, self.run, self.last_step = "console" in args.logger_names, None, None
        if "wandb" in args.logger_names and os.environ.get("WANDB_MODE", "online") != "disabled":
            import wandb

            self.run = wandb.init(
                project=args.project_name,
                name=args.experiment_name,
                config=config,
                dir=os.environ.get("WANDB_DIR") or None,
            )

    def log(self, step: int, metrics: dict) -> None:
        self.last_step = step
        if self.console:
            print(trl_backend.console_line(step, metrics), flush=True)
        if self.run is not None:
            self.run.log(metrics, step=step)

    def finish(self, exit_code: int = 0, last_step: int | None = None) -> None:
        """Record how the run ended (the collector's completeness): ``[trl] end: exit=N`` and wandb's exit code."""
        if self.console:
            print(f"[trl] end: exit={exit_code} steps={'none' if last_step is None else last_step}", flush=True)
        if self.run is not None:
            self.run.summary["run/exit_code"] = exit_code
            self.run.finish(exit_code=exit_code)


def make_callback(logger: RunLogger, evaluate, test_freq: int):
    """A TrainerCallback: validation before training, every ``test_freq`` steps and at the end; VERL-step logs."""
    from transformers import TrainerCallback

    class VerlStyleLog(TrainerCallback):
        def __init__(self):
            self.pending = {}

        def add(self, metrics: dict) -> None:
            """Metrics to log with the current step's line (adaptive K's re-estimates)."""
            self.pending = {**self.pending, **metrics}

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            logger.log(0, {**self.pending, **evaluate(model)})  # pending: adaptive K's step-0 estimate, if any
            self.pending = {}

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step, at_end = -(-state.global_step // trl_backend.UPDATES_PER_STEP), state.global_step >= state.max_steps
            if at_end or (state.global_step % trl_backend.UPDATES_PER_STEP == 0 and step % test_freq == 0):
                self.pending = {**self.pending, **evaluate(model)}

        def on_log(self, args, state, control, logs=None, **kwargs):
            step = -(-state.global_step // trl_backend.UPDATES_PER_STEP)
            metrics = {**trl_backend.verl_metrics(logs or {}), **self.pending}
            if "critic/score/mean" in metrics or self.pending:
                logger.log(step, metrics)
                self.pending = {}

        def on_train_end(self, args, state, control, **kwargs):
            if self.pending:
                logger.log(-(-state.global_step // trl_backend.UPDATES_PER_STEP), self.pending)
                self.pending = {}

    return VerlStyleLog()


def advisor_estimator(args: TrlTrainConfig) -> str:
    """The estimator the advisor models for this run: std-normalised GRPO (``scale_rewards="group"``) unless
    ``--no-norm_adv_by_std``; then the paper's GRPO (TRL's unnormalised advantage is (K-1)/K times its weights:
    the same direction, a step (K-1)/K as long)."""
    return est.GRPO_STD if args.norm_adv_by_std else est.GRPO


def adaptive_callback(args: TrlTrainConfig, train_rows: list[dict], tokenizer, publish):
    """Adaptive K's callback: the advisor on ``--adaptive_k_T`` fixed training rows, each re-estimate printed."""
    rows = [train_rows[i] for i in adaptive_k.advisor_prompts(len(train_rows), args.adaptive_k_T, args.seed)]
    count = [0]

    def advise(model):
        advice = adaptive_k.estimate(
            model,
            tokenizer,
            rows,
            k_list=args.allowed_k,
            budget=args.budget,
            M=args.adaptive_k_M,
            n_oracle=args.adaptive_k_n_oracle,
            temperature=args.temperature,
            max_new_tokens=args.max_response_length,
            seed=args.seed * 1000 + count[0],  # fresh samples at every re-estimate
            estimator=advisor_estimator(args),
        )
        count[0] += 1
        k = adaptive_k.chosen_k(advice, callback.trainer.group_size)
        said = advice.get("measured_curve") or advice.get("recommendation") or {}
        print(f"[adaptive_k] {said.get('message', 'no recommendation')} -> K = {k}", flush=True)
        return k, adaptive_k.advice_metrics(advice, k)

    callback = adaptive_k.make_callback(advise, args.adaptive_k_every, publish)
    return callback


def quiet_progress():
    """transformers' progress bar without its raw log printing (our VERL-style lines replace it)."""
    from transformers.trainer_callback import ProgressCallback

    class QuietProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            pass

    return QuietProgress()


def run(args: TrlTrainConfig) -> dict:
    """Train one run; returns ``{"val_start", "val_end", "seconds"}`` (first validation metric)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from transformers.trainer_callback import ProgressCallback
    from trl import GRPOTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    set_seed(args.seed)
    compute_score = trl_backend.load_reward(args.reward_path, args.reward_name)
    train_rows, val_rows = trl_backend.verl_rows(args.train_file), trl_backend.verl_rows(args.val_file)
    from grpo_mse.policy.loading import model_folder

    model_path = model_folder(args.model)  # a GGUF file: its converted folder (special tokens from the file)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_rows, train_dropped = trl_backend.fit_prompt_length(
        train_rows, val_rows, tokenizer, args.max_prompt_length, args.val_file
    )
    config = trl_backend.grpo_config(args, len(train_rows))  # refuses fewer rows than prompts per step
    settings = budget_settings(args.group_size, args.budget)
    steps = config.max_steps // trl_backend.UPDATES_PER_STEP
    if args.adaptive_k_every:
        require(
            args.adaptive_k_T <= len(train_rows),
            f"--adaptive_k_T {args.adaptive_k_T} is more than the {len(train_rows)} training rows",
        )
        print(
            f"[trl] adaptive K: every {args.adaptive_k_every} steps from step 0, K in {args.allowed_k}; advisor on "
            f"{args.adaptive_k_T} training prompts, M={args.adaptive_k_M}, n_oracle={args.adaptive_k_n_oracle}; "
            f"{args.budget} distinct prompts drawn per step, BUDGET/K of them used",
            flush=True,
        )
    print(
        f"[trl] K={args.group_size} budget={args.budget} prompts/step={settings['train_batch_size']} steps={steps} "
        f"train={len(train_rows)} val={len(val_rows)} lr={args.lr} seed={args.seed}",
        flush=True,
    )
    if args.dry_run:
        print("[dry run] TRL GRPOConfig built and data read; nothing was trained", file=sys.stderr)
        return {}

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    run_config = {
        "trainer": "trl",
        "budget": args.budget,
        "lr": args.lr,
        "steps": steps,
        "actor_rollout_ref": {"rollout": {"n": args.group_size, "temperature": args.temperature}},
        "data": {
            "seed": args.seed,
            **settings,
            "max_prompt_length": args.max_prompt_length,
            "train_prompts": len(train_rows),
            "train_prompts_dropped": train_dropped,  # longer than max_prompt_length (the warning line's count)
        },
        "algorithm": {"norm_adv_by_std_in_grpo": args.norm_adv_by_std},
    }
    if args.adaptive_k_every:
        run_config["adaptive_k"] = {
            "every": args.adaptive_k_every,
            "K_list": args.allowed_k,
            "T": args.adaptive_k_T,
            "M": args.adaptive_k_M,
            "n_oracle": args.adaptive_k_n_oracle,
        }
    logger = RunLogger(args, run_config)
    history = []

    def evaluate(m):
        result = trl_backend.greedy_accuracy(m, tokenizer, val_rows, compute_score, args.max_response_length)
        history.append(result)
        return result

    verl_log = make_callback(logger, evaluate, args.test_freq)
    callbacks, trainer_class = [verl_log], GRPOTrainer
    if args.adaptive_k_every:  # first, so that a re-estimate's metrics join the same step's log line
        callbacks.insert(0, adaptive_callback(args, train_rows, tokenizer, verl_log.add))
        trainer_class = adaptive_k.make_trainer_class()
    trainer = trainer_class(
        model=model,
        reward_funcs=[trl_backend.trl_reward(compute_score)],
        args=config,
        train_dataset=Dataset.from_list(train_rows),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    if args.adaptive_k_every:
        callbacks[0].trainer = trainer
        trainer.group_size = args.group_size
    trainer.remove_callback(ProgressCallback)  # its on_log prints every raw TRL log dict
    trainer.add_callback(quiet_progress())
    start = time.time()
    try:
        trainer.train()
    except BaseException as error:
        interrupted = isinstance(error, KeyboardInterrupt)
        logger.finish(130 if interrupted else 1, logger.last_step)
        raise
    logger.finish(0, logger.last_step)
    seconds = time.time() - start
    if args.save_model:
        trainer.save_model(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
        print(f"[trl] final model -> {args.output_dir}", flush=True)
    key = next(iter(history[0]))
    print(f"[trl] {key}: {history[0][key]:.4f} -> {history[-1][key]:.4f} in {seconds:.0f} s", flush=True)
    return {"val_start": history[0][key], "val_end": history[-1][key], "seconds": seconds}


TRAINING_MODULES = ("torch", "transformers", "trl", "datasets")


def check_modules(names=TRAINING_MODULES) -> None:
    """One line naming this interpreter when it cannot import a module training needs (the launcher's PYTHON_BIN
    defaults to ``python``, which may be another environment's)."""
    import importlib.util

    def found(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses the name
            return False

    missing = [name for name in names if not found(name)]
    require(
        not missing,
        f"{sys.executable} cannot import {', '.join(missing)}: set PYTHON_BIN to the python of the environment "
        "that has the requirements (pip install -r requirements.txt -r requirements-verl.txt)",
    )


def main(argv=None) -> None:
    args = parse_args(argv)  # refuses bad flags and paths
    check_modules()
    if not args.check_only:
        run(args)


if __name__ == "__main__":
    cli.run(main)
