"""Adaptive group size for the TRL backend: re-estimate the best K every few steps and train with it.

Every ``every`` steps (step 0 included: the starting policy) the group-size advisor of run_tracecov.py runs on
the CURRENT policy and the next steps use its best allowed K. The advisor is the library's own: the oracle run
and the trace-of-covariance run with its advisor (``grpo_mse.runs.group_size``, training's one door into the
runs), on a saved copy of the policy in a temporary folder, over a fixed random subset of T training prompts (never the
validation rows) with M groups per K and V(x) from n_oracle samples, at the training rollouts' temperature.

How a step changes K without touching TRL's loop (``AdaptiveKTrainer``):
- the train sampler yields BUDGET distinct prompts per generation batch (TRL's ``RepeatSampler`` with
  ``mini_repeat_count=1``, repeated for the four updates as TRL repeats a fixed-K batch);
- at generation time the first BUDGET/K of them are kept, each repeated K times in place, and
  ``num_generations`` is set to K before TRL's own ``_generate_and_score_completions`` groups the rewards;
- ``AdaptiveKCallback`` sets K at the start of training and at the end of every ``every``-th step (before the
  next step's generation), and logs the advisor's answer; TRL logs the K in force as ``trl/group_size``.

Which K, for the estimator the run trains with: for the paper's GRPO (``--no-norm_adv_by_std``) the argmin over
the allowed K of the exact budgeted error c1 K + c3/(K - 1) at the advisor's point estimates (``pooled.K_best``)
when c1 and c3 are finite and > 0, whether or not their intervals identify it (the ``adaptive_k/identified``
metric says which); when c1 or c3 is undefined, infinite or <= 0, or the point estimates tie, K stays (no K from
constants that name none). For std-normalised GRPO (TRL's default, ``scale_rewards="group"``) the argmin of its
budgeted error measured at each allowed K (``measured_curve.K_best_point``; K stays when an error is undefined
or the smallest is not > 0).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import random
import sys
import tempfile
import time

from grpo_mse.gradients import estimators as est
from grpo_mse.training.budget import budget_settings
from grpo_mse.training.trl_backend import UPDATES_PER_STEP  # four updates per generation batch


def default_k_list(budget: int) -> list[int]:
    """The powers of two >= 2 that fit the budget as a fixed K does (``budget_settings``: K divides BUDGET/8)."""
    out, k = [], 2
    while k <= budget:
        try:
            budget_settings(k, budget)
            out.append(k)
        except ValueError:
            pass
        k *= 2
    return out


def advisor_prompts(n_rows: int, count: int, seed: int) -> list[int]:
    """Positions of the ``count`` training rows the advisor uses at every re-estimate (fixed by ``seed``)."""
    return sorted(random.Random(f"adaptive-k-{seed}").sample(range(n_rows), count))


def regroup(inputs: list[dict], k: int) -> list[dict]:
    """The first len(inputs)/K prompts of a generation batch, each repeated K times in place (TRL's layout)."""
    if len(inputs) % k:
        raise ValueError(f"K={k} does not divide the generation batch of {len(inputs)} prompts")
    return [dict(row) for row in inputs[: len(inputs) // k] for _ in range(k)]


@contextlib.contextmanager
def preserved_random_state():
    """Run a block without moving the global random streams (python, numpy, torch CPU) of the training run."""
    import numpy as np
    import torch

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


@contextlib.contextmanager
def quiet_stderr():
    """The advisor runs' progress bars and notes kept off the training log; shown (last lines) if they fail."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stderr(buffer):
            yield
    except BaseException:
        sys.stderr.write("".join(buffer.getvalue().splitlines(keepends=True)[-20:]))
        raise


def estimate(
    model,
    tokenizer,
    rows: list[dict],
    *,
    k_list: list[int],
    budget: int,
    M: int,
    n_oracle: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    estimator: str = est.GRPO,
) -> dict:
    """The group-size advisor (``advise``'s JSON) of ``model`` on ``rows``: the oracle run then the tracecov run,
    on a saved copy of the policy in a temporary folder (removed after), leaving the global random streams
    as they were. Sampling at ``temperature`` and top-p 1 (the TRL rollouts), scores of the same law.
    ``estimator`` grpo_std also measures std-normalised GRPO's budgeted error at each K (``measured_curve``)."""
    from grpo_mse.runs.group_size import measure_advice

    with quiet_stderr(), preserved_random_state(), tempfile.TemporaryDirectory(prefix="adaptive_k_") as tmp:
        policy = os.path.join(tmp, "policy")
        model.save_pretrained(policy)
        tokenizer.save_pretrained(policy)
        return measure_advice(
            policy,
            rows,
            tmp,
            k_list=k_list,
            budget=budget,
            M=M,
            n_oracle=n_oracle,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            seed=seed,
            estimator=estimator,
        )


def chosen_k(advice: dict, current: int) -> int:
    """The argmin over the allowed K of c1 K + c3/(K - 1) at the advisor's point estimates (``pooled.K_best``)
    when c1 and c3 are finite and > 0; ``current`` otherwise (undefined, infinite, <= 0 or tied: no K from
    constants that name none). Advice on std-normalised GRPO: its measured curve's point argmin
    (``K_best_point``, a K it measured) when that error is > 0, else ``current``."""
    from grpo_mse.analysis.bootstrap import number

    curve = advice.get("measured_curve")
    if advice.get("estimator") == est.GRPO_STD:
        curve = curve if isinstance(curve, dict) else {}
        best, measured = curve.get("K_best_point"), curve.get("K") or []
        if not (isinstance(best, int) and not isinstance(best, bool) and best in measured):
            return current
        error = ((curve.get("per_K") or {}).get(str(best)) or {}).get("error") or {}
        return best if number(error.get("estimate")) > 0 else current  # below 0: noise, no K
    pooled = advice.get("pooled") or {}
    try:
        c1, c3, best = (number(pooled.get(name)) for name in ("c1", "c3", "K_best"))
    except (TypeError, ValueError):
        return current
    usable = all(math.isfinite(v) and v > 0 for v in (c1, c3)) and math.isfinite(best)
    return int(best) if usable else current


def advice_metrics(advice: dict, k: int) -> dict:
    """What a re-estimate logs: the K chosen, the constants, whether the advisor identifies K (its
    ``advice_status``), and K* only where it does ("inf", null and text are left out: not numbers)."""
    from grpo_mse.analysis.error_model import advice_status

    pooled, now = advice.get("pooled") or {}, advice_status(advice)
    metrics = {"adaptive_k/K": float(k), "adaptive_k/identified": float(now.identified)}
    curve = advice.get("measured_curve")
    if isinstance(curve, dict):  # std-normalised GRPO: whether its measured curve's intervals identify the K
        metrics["adaptive_k/std_identified"] = float(curve.get("identified") is True)
    for name in ("c1", "c2", "c3"):
        value = pooled.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            metrics[f"adaptive_k/{name}"] = float(value)
    if now.K_star_exact is not None:
        metrics["adaptive_k/K_star_exact"] = float(now.K_star_exact)
    return metrics


def make_trainer_class():
    """``AdaptiveKTrainer``: TRL's GRPOTrainer with BUDGET distinct prompts per generation batch, regrouped to the
    K in force (``self.group_size``) at generation time."""
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    class AdaptiveKTrainer(GRPOTrainer):
        group_size: int  # the K of the next generation batch (set by AdaptiveKCallback)

        def _get_train_sampler(self, dataset=None):
            return RepeatSampler(
                data_source=self.train_dataset if dataset is None else dataset,
                mini_repeat_count=1,
                batch_size=self.args.generation_batch_size,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
                shuffle=self.shuffle_dataset,
                seed=self.args.seed,
            )

        def _generate_and_score_completions(self, inputs):
            if not self.model.training:
                return super()._generate_and_score_completions(inputs)
            self.num_generations = self.group_size
            self._metrics["train"]["group_size"].append(float(self.group_size))
            return super()._generate_and_score_completions(regroup(inputs, self.group_size))

    return AdaptiveKTrainer


def make_callback(advise, every: int, publish):
    """A TrainerCallback that sets ``trainer.group_size`` from ``advise(model) -> (K, metrics)`` at the start and
    at the end of every ``every``-th step (not the last), and hands the metrics to ``publish(metrics)``."""
    from transformers import TrainerCallback

    class AdaptiveKCallback(TrainerCallback):
        trainer = None  # set after the trainer is built

        def update(self, model) -> None:
            start = time.time()
            k, metrics = advise(model)
            self.trainer.group_size = k
            publish({**metrics, "adaptive_k/seconds": time.time() - start})

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.update(model)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = state.global_step // UPDATES_PER_STEP
            boundary = state.global_step % UPDATES_PER_STEP == 0
            if boundary and step % every == 0 and state.global_step < state.max_steps:
                self.update(model)

    return AdaptiveKCallback()
