"""Paired comparisons of the estimators per K, all from one joint prompt bootstrap (``bootstrap``).

Every estimator is evaluated on the same samples of the same prompts, so ratios and differences of their
mean MSEs are paired: a replicate resamples prompts once and recomputes every statistic from them.
- ratio e/oracle = mean_x MSE_e(x) / mean_x MSE_oracle(x), difference e - oracle (MSE = tr Cov + bias^2);
- heavy tails: the share of the largest prompt in the sum over prompts, and the ratio of mean MSEs within bands of
  V(x) (a ratio of means per prompt group: consistent, unlike a median of ratios of noisy per-prompt traces);
- vanilla's bias when the scored law is not the sampled one (model score at top_p < 1, or EOS dropped): its mean
  exceeds the baselined estimators' by V E_q[s], so MSE = tr Cov + V^2 ||E_q s||^2 (``vanilla_bias2``);
- ||E s||^2 per prompt (unbiased, from the group-mean scores): 0 when the score is that of the sampled law;
- oracle noise: the bias Var(V_hat) tr Cov(s_bar) that the estimated V adds to the oracle's trace;
- an estimator with an own target in the registry against it: std-normalised GRPO against its per-prompt
  target g / sqrt(V (1 - V)) (Appendix A).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from grpo_mse.analysis import bootstrap
from grpo_mse.analysis.bootstrap import column, prompt_columns, rounded
from grpo_mse.errors import DataError
from grpo_mse.gradients import estimators as est
from grpo_mse.gradients.estimators import GRPO, ORACLE, VANILLA
from grpo_mse.tables.inputs import whole
from grpo_mse.tables.records import PromptRecord, SavedRecord, saved

V_BANDS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))  # the last band includes V = 1


@dataclass(frozen=True, kw_only=True)
class PairedSummary(SavedRecord):
    """The paired comparisons of the estimators per K (``paired_summary``; run_tracecov's "paired" block). A
    series is a list of summaries (``bootstrap.Summary``, as saved), one per K of K_list; {name: series} tables
    are keyed by estimator ("e") or pair ("e/oracleV", "e-oracleV"). What a run does not measure is None (left
    out)."""

    K_list: list[int]  # the group sizes, in the order of every series
    n_boot: int  # bootstrap replicates behind every interval
    mean: dict[str, list[dict]]  # per estimator, the mean MSE over prompts (clipped at 0)
    ratio: dict[str, list[dict]]  # e/oracleV (and naive/grpo): ratio of mean MSEs, studentized (clipped at 0)
    difference: dict[str, list[dict]]  # e-oracleV: difference of mean MSEs
    ratio_by_V_band: dict | None = None  # {"bands", "n_prompts" [per K, per band], "ratio" {pair: [per K [per band
    # summary]]}} (absent in the first files)
    largest_prompt_share: dict[str, list[float]]  # per estimator, max_x MSE(x) / sum_x MSE(x) at each K
    trace_mean: dict[str, list[dict]] | None = None  # biased estimators: the mean tr Cov (clipped at 0)
    trace_ratio: dict[str, list[dict]] | None = None  # biased estimators: tr Cov over the oracle's (clipped at 0)
    mean_score_sq: list[dict] | None = None  # ||E s||^2 per K (clipped at 0)
    mean_score_sq_mean_over_K: dict | None = None  # its mean over K
    oracle_noise: list[dict] | None = None  # the bias Var(V_hat) tr Cov(s_bar) the estimated V adds, per K
    oracle_noise_mean_over_K: dict | None = None  # its mean over K
    oracle_noise_relative: list[dict] | None = None  # oracle noise over the oracle's mean MSE, per K
    grpo_std_own_target: dict | None = None  # std-GRPO against its own target: mse, bias2 series, n_prompts, note
    # (one such field, "<name>_own_target", per estimator with an own target in the registry)
    note: str  # how the numbers were computed


@dataclass(frozen=True, kw_only=True)
class RunStatistics(SavedRecord):
    """What run_tracecov adds to its main JSON from one set of bootstrap replicates (``run_statistics``)."""

    paired: PairedSummary
    group_size_advisor: object = (
        None  # analysis.advisor.GroupSizeAdvice; None: no advice (fewer than 2 prompts, or not asked)
    )


def oracle_value_variance(value: float, n_oracle) -> float:
    """Unbiased Var(V_hat) = V_hat (1 - V_hat) / (n_oracle - 1) of a Monte Carlo V from ``n_oracle`` rewards (a
    whole number >= 1, also 256.0 as read from a table); 0 for an exact V (``n_oracle`` null) or n_oracle = 1.
    DataError for anything else ('256', 256.5, 0): a silent 0 would drop the oracle-noise correction."""
    if n_oracle is None or (isinstance(n_oracle, float) and np.isnan(n_oracle)):  # NaN: pandas' null
        return 0.0
    n = whole(n_oracle)
    if n is None or n < 1:
        raise DataError(f"n_oracle {n_oracle!r} is not a whole number >= 1 (null for an exact V)")
    return value * (1 - value) / (n - 1) if n > 1 else 0.0


def score_law_mismatch(score_distribution: str, top_p: float, include_eos: bool = True) -> bool:
    """True when E_q[s] need not be 0: the score is grad log pi_T but the samples come from the top_p < 1 nucleus
    (``score_distribution`` "model"), or the sampled EOS token is left out of the score."""
    return (score_distribution == "model" and top_p < 1.0) or not include_eos


def vanilla_bias2(value: float, mean_score_sq: float) -> float:
    """Squared bias of vanilla against the baselined estimators' target: its mean exceeds the oracle's (with the
    table's V) by exactly V E_q[s_g], so bias^2 = V^2 ||E_q s||^2, from the unbiased ``mean_score_sq`` (0 at V = 0)."""
    return 0.0 if value == 0 else value**2 * mean_score_sq


def band_ratio(weights: np.ndarray, numerator: np.ndarray, denominator: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[R] ratio of weighted means over the prompts in ``mask`` (nan where none is drawn or the mean is 0)."""
    top, bottom = (bootstrap.weighted_mean(weights, np.where(mask, x, np.nan)) for x in (numerator, denominator))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bottom != 0, top / bottom, np.nan)


def _series(values: list[np.ndarray], weights: np.ndarray) -> list[dict]:
    return [bootstrap.summarise(v, weights) for v in values]


def largest_share(values: np.ndarray) -> float:
    """max_x v_x / sum_x v_x over the prompts (1/T when all are equal)."""
    values = values[np.isfinite(values)]
    total = values.sum()
    return float(values.max() / total) if len(values) and total > 0 else float("nan")


def paired_summary(records_by_k: dict[int, list[PromptRecord]], k_list, names, weights: np.ndarray) -> PairedSummary:
    """Per K: mean MSE per estimator, ratio / difference to the oracle (and vanilla / GRPO), largest-prompt
    share, ||E s||^2, oracle noise and std-GRPO against its own target, each with a joint 95% interval."""
    _, position = prompt_columns({k: records_by_k[k] for k in k_list})
    out = {
        "K_list": list(k_list),
        "n_boot": bootstrap.n_boot_of(weights),
        "mean": {},
        "ratio": {},
        "difference": {},
        "ratio_by_V_band": {"bands": [list(b) for b in V_BANDS], "n_prompts": [], "ratio": {}},
        "largest_prompt_share": {},
    }
    columns = {n: [column(records_by_k[k], position, lambda r, n=n: r.mse_of(n)) for k in k_list] for n in names}
    means = {n: [bootstrap.weighted_mean(weights, c) for c in columns[n]] for n in names}
    biased = [n for n in names if any(n in (r.bias2 or {}) for k in k_list for r in records_by_k[k])]
    # The oracle's tr Cov too, biased or not: a biased estimator's trace_ratio divides by it.
    traces = {
        n: [
            bootstrap.weighted_mean(weights, column(records_by_k[k], position, lambda r, n=n: r.tr_cov[n]))
            for k in k_list
        ]
        for n in set(biased) | {ORACLE} & set(names)
    }
    for n in names:
        out["mean"][n] = _series(means[n], weights)
        out["largest_prompt_share"][n] = [largest_share(c) for c in columns[n]]
    if biased:
        out["trace_mean"] = {n: _series(traces[n], weights) for n in biased}
    values = [column(records_by_k[k], position, lambda r: r.V_oracle) for k in k_list]
    bands = [[(v >= low) & ((v < high) | (high == 1.0) & (v <= 1.0)) for low, high in V_BANDS] for v in values]
    out["ratio_by_V_band"]["n_prompts"] = [[int(b.sum()) for b in per_k] for per_k in bands]
    if ORACLE in names:
        for n in names:
            if n == ORACLE:
                continue
            with np.errstate(invalid="ignore", divide="ignore"):
                out["ratio"][f"{n}/{ORACLE}"] = [
                    bootstrap.ratio_summary(weights, a, b)[0] for a, b in zip(columns[n], columns[ORACLE])
                ]
                if n in biased:
                    out.setdefault("trace_ratio", {})[f"{n}/{ORACLE}"] = _series(
                        [a / b for a, b in zip(traces[n], traces[ORACLE])], weights
                    )
                out["ratio_by_V_band"]["ratio"][f"{n}/{ORACLE}"] = [
                    [bootstrap.summarise(band_ratio(weights, a, b, mask), weights) for mask in per_k]
                    for a, b, per_k in zip(columns[n], columns[ORACLE], bands)
                ]
            out["difference"][f"{n}-{ORACLE}"] = _series([a - b for a, b in zip(means[n], means[ORACLE])], weights)
    if {VANILLA, GRPO} <= set(names):  # the paper's ordering vanilla > GRPO, paired like the rest
        with np.errstate(invalid="ignore", divide="ignore"):
            out["ratio"][f"{VANILLA}/{GRPO}"] = [
                bootstrap.ratio_summary(weights, a, b)[0] for a, b in zip(columns[VANILLA], columns[GRPO])
            ]
    optional = {
        "mean_score_sq": lambda r: np.nan if r.mean_score_sq is None else r.mean_score_sq,
        "oracle_noise": lambda r: np.nan if r.oracle_noise is None else r.oracle_noise,
    }
    for key, value_fn in optional.items():
        cols = [column(records_by_k[k], position, value_fn) for k in k_list]
        if any(np.isfinite(c).any() for c in cols):
            per_k = [bootstrap.weighted_mean(weights, c) for c in cols]
            out[key] = _series(per_k, weights)
            with np.errstate(invalid="ignore"):
                out[f"{key}_mean_over_K"] = bootstrap.summarise(np.mean(per_k, axis=0), weights)
            if key == "oracle_noise" and ORACLE in names:
                with np.errstate(invalid="ignore", divide="ignore"):
                    out["oracle_noise_relative"] = _series(
                        [bootstrap.weighted_mean(weights, c) / m for c, m in zip(cols, means[ORACLE])], weights
                    )
    # Means and ratios of MSEs are >= 0 but their unbiased estimates need not be; differences may be negative.
    for table in (out["mean"], out["ratio"], out.get("trace_mean", {}), out.get("trace_ratio", {})):
        for name, series in table.items():
            table[name] = [bootstrap.at_least_zero(summary) for summary in series]
    for name, per_k in out["ratio_by_V_band"]["ratio"].items():  # a band's mean MSE can be below 0 too
        out["ratio_by_V_band"]["ratio"][name] = [[bootstrap.at_least_zero(s) for s in per_band] for per_band in per_k]
    for key in ("mean_score_sq", "oracle_noise"):
        if key in out:
            out[key] = [bootstrap.at_least_zero(summary) for summary in out[key]]
            out[f"{key}_mean_over_K"] = bootstrap.at_least_zero(out[f"{key}_mean_over_K"])
    for name in est.own_targets(names):  # the registry's own targets (std-GRPO: "grpo_std_own_target")
        own = {
            key: [
                column(records_by_k[k], position, lambda r, part=part, name=name: (part(r) or {}).get(name, np.nan))
                for k in k_list
            ]
            for key, part in (("mse_own", lambda r: r.mse_own), ("bias2_own", lambda r: r.bias2_own))
        }
        if any(np.isfinite(c).any() for c in own["mse_own"]):
            out[f"{name}_own_target"] = {
                "mse": _series([bootstrap.weighted_mean(weights, c) for c in own["mse_own"]], weights),
                "bias2": _series([bootstrap.weighted_mean(weights, c) for c in own["bias2_own"]], weights),
                "n_prompts": [int(np.isfinite(c).sum()) for c in own["mse_own"]],
                "note": est.get(name).own_target.note,
            }
    out["note"] = (
        "Joint prompt bootstrap (one resample of prompts per replicate, shared by every statistic and "
        "by group_size_advisor); estimate = the data, ci95 = BCa 95% interval, except ratio: studentized "
        "bootstrap on the log scale (BCa undercovers under heavy tails). ratio = ratio of "
        "mean MSEs (tr Cov + bias^2) over prompts (to the oracle, and naive/grpo); "
        "trace_mean / trace_ratio = the same for tr Cov alone, "
        "given for estimators whose MSE differs from it; ratio_by_V_band = ratio of mean MSEs over the "
        "prompts with V_oracle in each band (last band includes 1); "
        "largest_prompt_share = max_x MSE(x) / sum_x MSE(x)."
    )
    return PairedSummary(**saved(out))


def run_statistics(
    records_by_k: dict[int, list[PromptRecord]], k_list, names, seed: int = 0, n_boot: int = 2000, advice=None
) -> RunStatistics:
    """``paired_summary`` and, with ``advice`` (a function of the bootstrap weights returning the group-size
    advisor's ``GroupSizeAdvice``: ``runs.advisor_hook.AdvisorHook.advice``), the advice, from ONE set of bootstrap
    replicates. The advice needs two prompts or more."""
    prompts, _ = prompt_columns({k: records_by_k[k] for k in k_list})
    weights = bootstrap.prompt_weights(len(prompts), n_boot, seed)
    paired = paired_summary(records_by_k, k_list, names, weights)
    if advice is not None and len(prompts) < 2:  # c1 and every interval need two prompts or more
        print("note: the group-size advisor needs 2 or more prompts (--T 2+); skipped", file=sys.stderr)
    if advice is None or len(prompts) < 2:
        return RunStatistics(paired=paired)
    return RunStatistics(paired=paired, group_size_advisor=advice(weights))


def half_width_text(half: float | None) -> str:
    """``±half`` for a 95% half-width, `` [n/a]`` where there is none (one prompt: nan in memory, null when saved),
    as the paired cells print a missing interval."""
    return f"±{half:.2g}" if half is not None and np.isfinite(half) else " [n/a]"


def _cell(label: str, saved_summary: dict) -> str:
    summary = bootstrap.Summary.from_json(saved_summary)
    if not summary.ci95:  # one prompt, or too many undefined replicates: no interval
        return f"{label}={rounded(summary.estimate)} [n/a]"
    low, high = summary.ci95
    return f"{label}={rounded(summary.estimate)} [{rounded(low)}, {rounded(high)}]{bootstrap.below_zero_flag(summary)}"


def describe(paired: dict) -> str:
    """One line per K: paired ratios and differences to the oracle (and ||E s||^2) with 95% intervals, from the
    saved "paired" block (``PairedSummary.to_json``)."""
    lines = []
    for i, k in enumerate(paired["K_list"]):
        parts = [
            _cell(label, series[i])
            for table in (paired["ratio"], paired["difference"])
            for label, series in table.items()
        ]
        if "mean_score_sq" in paired:
            parts.append(_cell("||E s||^2", paired["mean_score_sq"][i]))
        lines.append(f"K={k:4d}  " + "  ".join(parts))
    if "mean_score_sq_mean_over_K" in paired:
        lines.append(_cell("||E s||^2 (prompts with 0<V<1, mean over K)", paired["mean_score_sq_mean_over_K"]))
    return "\n".join(lines)
