"""The statistics of the group-size advisor against training (scripts/k_validation.py): the advisor's
prediction, one setting's sweep summary, the comparison of two settings, adaptive K against the fixed-K sweep.

Every function takes per-run values, one row per run that counts (K, seed, value: the metric's mean over the
run's validation steps after step 0, as ``studies.advisor.training_runs.run_means`` returns them), so which runs
count is decided in one place. Per K: the mean over seeds with a 95% Student-t interval. Two K are "separated"
when the 95% Welch interval of the difference of their means excludes 0. The advisor's predicted budgeted error
at K is c1 K + c2 + c3/(K - 1) (times 1/N, which does not change ranks); the check is Spearman's rank
correlation between it and the observed mean across K (negative when the K with smaller predicted error train
better).

Across settings (``compare``): does the sweep's best K move the way the advisor's K* moves? Per pair of settings,
the direction of K* (up, down, same) against the direction of the best K, with the share of 2000 bootstrap
replicates (seeds resampled within each K of each setting, independently per setting) in which the best K moves
the advisor's way, the opposite way, or not at all.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, replace

import numpy as np

from grpo_mse.analysis import bootstrap, error_model
from grpo_mse.errors import require
from grpo_mse.gradients import estimators as est
from grpo_mse.tables.outputs import ACCURACY, mean_t_interval
from grpo_mse.tables.records import SavedRecord
from studies.advisor.sweep_stats import predicted_error, spearman, welch_interval

CONSTANTS = ("c1", "c2", "c3")  # the pooled constants a prediction carries


@dataclass(frozen=True, kw_only=True)
class Prediction(SavedRecord):
    """The advisor's prediction for one setting (``predict``; prediction_S.json), numbers as the advice saved them
    ("inf", null). ``from_json`` reads both saved shapes: the first (no identified, message or estimator; a
    ``best_allowed_K_ci95``) and the current one (the measured fields only for advice on std-GRPO)."""

    name: str  # the setting's name
    identified: bool | None = None  # whether the advice identifies K* (absent in the first files)
    message: str | None = None  # why K* is or is not identified (absent in the first files)
    K_star_exact: float | None  # 1 + sqrt(c3/c1) where identified, else null
    ci95: list | None  # K*'s 95% interval where identified, else null
    best_allowed_K: int | None  # the best allowed K where identified and unique, else null
    best_allowed_K_ci95: list | None = None  # the first files' bootstrap interval of the best K
    allowed_K: list[int] | None  # the K the advice considered
    c1: object  # the pooled constants as saved (a number, "inf" or null)
    c2: object
    c3: object
    c_ci95: dict[str, list | None]  # the 95% interval of c1, c2, c3
    budget: int | None  # N, sequences per step
    written_at: str  # UTC time the prediction was written (before the sweep ran)
    estimator: str | None = None  # the advised estimator (absent in the first files)
    measured_K_best: int | None = None  # advice on grpo_std: the measured best K where identified, else null
    measured_message: str | None = None  # advice on grpo_std: the measured curve's verdict

    def to_json(self) -> dict:
        """The saved prediction; measured_K_best (null or not) whenever there is a measured curve's message."""
        out = super().to_json()
        if self.measured_message is not None:
            out.pop("measured_message")
            out["measured_K_best"] = self.measured_K_best
            out["measured_message"] = self.measured_message
        return out


def predict(run: dict, name: str, written_at: str | None = None) -> Prediction:
    """The advisor's prediction from a run_tracecov JSON, stamped with the time it is written. K* and the best
    allowed K are stated only where the advisor identifies them (``error_model.advice_status``): null otherwise,
    with ``message`` saying why (c1 or c3 undefined, infinite, <= 0, or an interval reaching 0)."""
    adv = run.get("group_size_advisor")
    require(isinstance(adv, dict) and "pooled" in adv, "the run has no group_size_advisor (was --no_advisor set?)")
    pooled, ci = adv["pooled"], adv.get("ci95") or {}
    now = error_model.advice_status(adv)
    estimator, measured_k, measured_message = measured_prediction(adv)
    return Prediction(
        name=name,
        identified=now.identified,
        message=now.message,
        K_star_exact=now.K_star_exact,
        ci95=ci.get("K_star_exact") if now.identified else None,
        best_allowed_K=now.K_best,
        allowed_K=adv.get("allowed_K"),
        c1=pooled.get("c1"),
        c2=pooled.get("c2"),
        c3=pooled.get("c3"),
        c_ci95={c: ci.get(c) for c in ("c1", "c2", "c3")},
        budget=adv.get("budget"),
        written_at=written_at or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        estimator=estimator,
        measured_K_best=measured_k,
        measured_message=measured_message,
    )


def measured_prediction(adv: dict) -> tuple[str | None, int | None, str | None]:
    """(estimator, measured best K, measured message) of saved advice: for advice on std-normalised GRPO the
    measured curve's best K (None unless its intervals identify it) and message; (estimator or "grpo", None,
    None) otherwise."""
    curve = adv.get("measured_curve")
    if not isinstance(curve, dict):
        return adv.get("estimator", est.GRPO), None, None
    return (
        curve.get("estimator"),
        curve.get("K_best") if curve.get("identified") is True else None,
        curve.get("message"),
    )


def prediction_status(prediction: Prediction) -> error_model.AdviceStatus:
    """``error_model.status`` of a saved prediction (recomputed from its constants: older files stated a best K
    from unidentified constants)."""
    constants = {c: getattr(prediction, c) for c in CONSTANTS}
    return error_model.status(constants, prediction.c_ci95 or {}, prediction.allowed_K, prediction.budget)


def describe_prediction(prediction: Prediction) -> str:
    """ "K*_exact = 4.21 [1.59, 6.06], best allowed K = 4" where identified, else "K* not identified: why"."""
    now = prediction_status(prediction)
    if not now.identified:
        return f"K* not identified ({now.message})"
    low, high = error_model.interval_of(prediction.ci95) or (math.nan, math.nan)
    best = now.K_best if now.K_best is not None else "a tie"
    return (
        f"K*_exact = {bootstrap.rounded(now.K_star_exact)} "
        f"[{bootstrap.rounded(low)}, {bootstrap.rounded(high)}], "
        f"best allowed K = {best}"
    )


@dataclass(frozen=True, kw_only=True)
class SweepSummary(SavedRecord):
    """One setting's fixed-K sweep (``sweep_summary``; the "sweep" block of summary.json)."""

    metric: str  # "mean of METRIC over validation steps > 0"
    per_K: dict[str, dict]  # {K: {"mean", "ci95" (95% t-interval over seeds), "n_seeds"}}, K as text
    best_K: int  # the K with the largest mean
    started_at: str  # when the sweep started
    separated_pairs: list[list[int]]  # [K1, K2] whose 95% Welch interval of the difference excludes 0
    best_K_bootstrap: dict[str, float] | None = None  # share of seed-resampling replicates in which each K is best


@dataclass(frozen=True, kw_only=True)
class StatedAdvice(SavedRecord):
    """What a setting's prediction states now (``setting_summary``'s "advisor"), recomputed from its constants."""

    identified: bool  # whether the constants identify K*
    message: str  # why, in one line
    K_star_exact: float | None  # 1 + sqrt(c3/c1) where identified
    ci95: list | None  # K*'s 95% interval where identified
    best_allowed_K: int | None  # the best allowed K where identified and unique
    written_at: str | None  # when the prediction was written


@dataclass(frozen=True, kw_only=True)
class RankCorrelation(SavedRecord):
    """Spearman's correlation of the predicted budgeted error with the observed mean across K."""

    spearman_predicted_error_vs_metric: float  # nan with fewer than 3 K or a constant side
    K: list[int]  # the sweep's K
    predicted_error_times_N: list[float]  # c1 K + c2 + c3/(K - 1) at each K
    note: str


@dataclass(frozen=True, kw_only=True)
class SettingSummary(SavedRecord):
    """One setting of summary.json (``setting_summary``)."""

    name: str  # the setting's name
    advisor: StatedAdvice
    sweep: SweepSummary
    rank_correlation: RankCorrelation

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> SettingSummary:
        """The setting of a saved summary.json entry."""
        found = super().from_json(data, where)
        return replace(
            found,
            advisor=StatedAdvice.from_json(found.advisor, where),
            sweep=SweepSummary.from_json(found.sweep, where),
            rank_correlation=RankCorrelation.from_json(found.rank_correlation, where),
        )


@dataclass(frozen=True, kw_only=True)
class Comparison(SavedRecord):
    """Whether the best K moves from one setting to another the advisor's way (``compare``)."""

    settings: list[str]  # the two settings' names, first to second
    advisor_K_star: list  # their identified K* (null where not identified)
    advisor_direction: int  # +1 up, -1 down, 0 same or not identified in a setting
    sweep_best_K: list[int]  # their sweeps' best K
    sweep_direction: int  # +1, -1 or 0
    agree: bool  # the sweep moves the advisor's (nonzero) way
    bootstrap_best_K_shares: dict[str, float]  # advisor_way, opposite_way, no_move: shares of replicates
    note: str


def sweep_summary(runs, metric: str, started_at: str) -> SweepSummary:
    """The "sweep" block of summary.json from one setting's per-run values (columns K, seed, value: the runs
    that count, as ``training_runs.run_means`` returns them)."""
    require(not runs.empty, f"no {metric} values after step 0")
    per_k, values = {}, {}
    for k, group in runs.groupby("K"):
        mean, half = mean_t_interval(group["value"].tolist())
        values[int(k)] = group["value"].to_numpy()
        per_k[str(int(k))] = {"mean": mean, "ci95": share_interval(metric, mean, half), "n_seeds": int(len(group))}
    ks = sorted(values)
    separated = []
    for i, k1 in enumerate(ks):
        for k2 in ks[i + 1 :]:
            if min(len(values[k1]), len(values[k2])) < 2:
                continue
            lo, hi = welch_interval(values[k1], values[k2])
            if lo > 0 or hi < 0:
                separated.append([k1, k2])
    best = max(ks, key=lambda k: per_k[str(k)]["mean"])
    return SweepSummary(
        metric=f"mean of {metric} over validation steps > 0",
        per_K=per_k,
        best_K=best,
        started_at=started_at,
        separated_pairs=separated,
    )


def compare(a: SettingSummary, b: SettingSummary, draws_a, draws_b) -> Comparison:
    """Does the best K move from setting a to setting b in the direction of the advisor's K*? The advisor's
    direction is 0 ("none") unless K* is identified in both settings."""
    k_a, k_b = a.advisor.K_star_exact, b.advisor.K_star_exact
    advisor_way = int(np.sign(k_b - k_a)) if k_a is not None and k_b is not None else 0
    moves = np.sign(np.asarray(draws_b, float) - np.asarray(draws_a, float))
    sweep = int(np.sign(b.sweep.best_K - a.sweep.best_K))
    shares = {
        "advisor_way": float(np.mean(moves == advisor_way)) if advisor_way else float("nan"),
        "opposite_way": float(np.mean(moves == -advisor_way)) if advisor_way else float("nan"),
        "no_move": float(np.mean(moves == 0)),
    }
    return Comparison(
        settings=[a.name, b.name],
        advisor_K_star=[k_a, k_b],
        advisor_direction=advisor_way,
        sweep_best_K=[a.sweep.best_K, b.sweep.best_K],
        sweep_direction=sweep,
        agree=bool(advisor_way != 0 and sweep == advisor_way),
        bootstrap_best_K_shares=shares,
        note="direction: +1 up, -1 down, 0 same (advisor: also 0 when K* is not identified in a setting), "
        "from the first setting to the second; shares over replicates resampling seeds within each K",
    )


def setting_summary(name: str, runs, prediction: Prediction, started_at: str, metric: str) -> SettingSummary:
    """One setting of summary.json: the advisor's prediction as it stands now, the sweep of its per-run values
    ``runs`` and the rank correlation of the predicted error with the observed mean across K."""
    sweep = sweep_summary(runs, metric, started_at)
    ks = sorted(int(k) for k in sweep.per_K)
    errors = [predicted_error({c: getattr(prediction, c) for c in CONSTANTS}, k) for k in ks]
    observed = [sweep.per_K[str(k)]["mean"] for k in ks]
    now = prediction_status(prediction)
    stated = StatedAdvice(
        identified=now.identified,
        message=now.message,
        K_star_exact=now.K_star_exact,
        ci95=prediction.ci95 if now.identified else None,
        best_allowed_K=now.K_best,
        written_at=prediction.written_at,
    )
    correlation = RankCorrelation(
        spearman_predicted_error_vs_metric=spearman(errors, observed),
        K=ks,
        predicted_error_times_N=errors,
        note="negative: K with smaller predicted error train better",
    )
    return SettingSummary(name=name, advisor=stated, sweep=sweep, rank_correlation=correlation)


@dataclass(frozen=True, kw_only=True)
class Arm(SavedRecord):
    """One arm's per-seed metric (``arm``)."""

    mean: float  # mean over seeds
    ci95: list[float]  # 95% Student-t interval over seeds (``share_interval``)
    n_seeds: int
    per_seed: list[float]  # the values, in seed order


@dataclass(frozen=True, kw_only=True)
class AdaptiveSummary(SavedRecord):
    """Adaptive K against the fixed-K sweep (``adaptive_summary``; summary_S.json of scripts/k_validation.py
    adaptive)."""

    setting: str  # the setting's name
    metric: str  # "mean of METRIC over validation steps > 0"
    started_at: str | None  # when the adaptive runs started
    adaptive: Arm  # the adaptive runs
    fixed: dict[str, Arm]  # {K: the sweep's runs at K}, K as text
    best_fixed_K: int  # the sweep's best K (chosen on the sweep alone)
    adaptive_minus_fixed: dict[str, dict]  # {K: {"difference", "welch_ci95", "separated"}}
    K_chosen: list[dict]  # the advisor's choices (``training_runs.adaptive_k``), one per re-estimate
    K_share_of_steps: dict[str, float]  # {K: share of the training steps run at K}
    K_per_step: dict  # {seed: [K of steps 1, 2, ...]}
    identified_share: float  # the share of choices where the advice identified K
    note: str

    @classmethod
    def from_json(cls, data: dict, where: str | None = None) -> AdaptiveSummary:
        """The summary of a saved summary_S.json."""
        found = super().from_json(data, where)
        fixed = {k: Arm.from_json(v, where) for k, v in found.fixed.items()}
        return replace(found, adaptive=Arm.from_json(found.adaptive, where), fixed=fixed)


def arm(values, metric: str) -> Arm:
    """One arm's per-seed metric: mean, 95% Student-t interval over seeds (``share_interval``), the seed count and
    the values."""
    mean, half = mean_t_interval(list(values))
    return Arm(mean=mean, ci95=share_interval(metric, mean, half), n_seeds=len(values), per_seed=list(values))


def share_interval(metric: str, mean: float, half: float) -> list[float]:
    """[mean - half, mean + half], clipped to [0, 1] when ``metric`` is an accuracy (a share: a t-interval over a
    few seeds can cross the bounds)."""
    low, high = mean - half, mean + half
    return [max(low, 0.0), min(high, 1.0)] if ACCURACY.search(metric) else [low, high]


def adaptive_summary(runs, fixed, adaptive_k, metric: str, name: str, started_at: str | None = None) -> AdaptiveSummary:
    """Adaptive K against every fixed K of the sweep (the same metric per run): means, 95% t-intervals, and the
    95% Welch interval of (adaptive - fixed); the best fixed K is the sweep's, chosen on the sweep alone.
    ``runs`` and ``fixed``: the per-run values of the adaptive runs and of the sweep (K, seed, value);
    ``adaptive_k``: what the adaptive runs chose (``training_runs.adaptive_k``)."""
    require(not runs.empty, f"no {metric} values after step 0 in the adaptive runs")
    require(not fixed.empty, f"no {metric} values after step 0 in the sweep runs")
    ours = runs.sort_values("seed")["value"].to_numpy(float)
    per_k = {int(k): g.sort_values("seed")["value"].to_numpy(float) for k, g in fixed.groupby("K")}
    best = max(per_k, key=lambda k: per_k[k].mean())
    comparisons = {}
    for k, values in sorted(per_k.items()):
        lo, hi = welch_interval(ours, values) if min(len(ours), len(values)) >= 2 else (math.nan, math.nan)
        comparisons[str(k)] = {
            "difference": float(ours.mean() - values.mean()),
            "welch_ci95": [lo, hi],
            "separated": bool(lo > 0 or hi < 0),
        }
    choices = adaptive_k.choices
    return AdaptiveSummary(
        setting=name,
        metric=f"mean of {metric} over validation steps > 0",
        started_at=started_at,
        adaptive=arm(ours, metric),
        fixed={str(k): arm(v, metric) for k, v in sorted(per_k.items())},
        best_fixed_K=best,
        adaptive_minus_fixed=comparisons,
        K_chosen=choices,
        K_share_of_steps=adaptive_k.share_of_steps,
        K_per_step=adaptive_k.per_step,
        identified_share=float(np.mean([c["identified"] for c in choices])) if choices else math.nan,
        note="per run: mean held-out greedy accuracy over the validation steps after step 0; per arm: mean and "
        "95% t-interval over seeds; adaptive_minus_fixed: 95% Welch interval of the difference of means; K_chosen: "
        "the K the advisor chose at each re-estimate (used from the next step on); K_share_of_steps: the share of "
        "training steps run at each K (trl/group_size); K_per_step: per seed, the K of steps 1, 2, ...",
    )
