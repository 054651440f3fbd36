"""Exact (one-token enumeration) against Monte Carlo (run_tracecov.py) per estimator and K: tr Cov, bias^2, MSE.

Both sides are means over the same prompts. Two ways to compare them:
- ``mc_*_ci95``: the run's own 95% half-width, 1.96 sd / sqrt(T) across prompts (what the figures draw). It also
  holds the spread of the exact values between prompts, so it is wider than the Monte Carlo error alone.
- ``z_*``: a paired test with the prompts held fixed: d_x = MC_x - exact_x per prompt (independent across
  prompts, mean 0 when the pipeline is right), z = mean d / (sd d / sqrt(T)).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import numpy as np

from grpo_mse.analysis.error_model import interval_of, k_star, paper_k_star
from grpo_mse.gradients import estimators as est
from grpo_mse.tables.outputs import Z95, mean_ci
from grpo_mse.tables.records import SavedRecord
from studies.exact.one_token import batch_c1_target

COLUMNS = [
    "K",
    "estimator",
    "exact_trace_cov",
    "mc_trace_cov",
    "mc_trace_cov_ci95",
    "z_trace_cov",
    "exact_bias2",
    "mc_bias2",
    "mc_bias2_ci95",
    "z_bias2",
    "exact_mse",
    "mc_mse",
    "mc_mse_ci95",
    "z_mse",
    "n_prompts",
]
MC_FIELDS = {"trace_cov": "trace", "bias2": "bias2", "mse": "mse"}


def per_prompt_path(run_json: str) -> str:
    """run_tracecov's long table next to its main JSON: BASE.json -> BASE_per_prompt.csv."""
    return run_json[: -len(".json")] + "_per_prompt.csv"


def read_per_prompt(path: str) -> dict[tuple[int, str, str], dict]:
    """{(K, estimator, str(id)): row} of run_tracecov's *_per_prompt.csv (trace, bias2, mse as floats)."""
    with open(path, encoding="utf-8") as handle:
        return {
            (int(r["K"]), r["estimator"], str(r["id"])): {f: float(r[f]) for f in ("trace", "bias2", "mse")}
            for r in csv.DictReader(handle)
        }


def paired_z(mc: np.ndarray, exact: np.ndarray) -> float:
    """mean(mc - exact) / (sd / sqrt(n)); 0 when both agree exactly, nan with fewer than two prompts."""
    d = mc - exact
    if len(d) < 2:
        return float("nan")
    se = d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean() / se) if se > 0 else (0.0 if d.mean() == 0 else math.copysign(math.inf, d.mean()))


def comparison_rows(theory: dict, mc: dict[tuple[int, str, str], dict], names) -> list[dict]:
    """One row per (K, estimator) present on both sides, over the prompts present on both sides."""
    rows = []
    for index, k in enumerate(theory["K_list"]):
        for name in names:
            pairs = [(p, mc[(k, name, str(p["id"]))]) for p in theory["per_prompt"] if (k, name, str(p["id"])) in mc]
            if not pairs:
                continue
            row = {"K": k, "estimator": name, "n_prompts": len(pairs)}
            for quantity, field in MC_FIELDS.items():
                if quantity == "bias2" and name in est.UNBIASED:  # zero by construction, not measured
                    row.update({"exact_bias2": 0.0, "mc_bias2": 0.0, "mc_bias2_ci95": 0.0, "z_bias2": float("nan")})
                    continue
                exact = np.array([p[quantity][name][index] for p, _ in pairs])
                measured = np.array([m[field] for _, m in pairs])
                stats = mean_ci(measured.tolist())
                row.update(
                    {
                        f"exact_{quantity}": float(exact.mean()),
                        f"mc_{quantity}": stats["mean"],
                        f"mc_{quantity}_ci95": stats["ci95"],
                        f"z_{quantity}": paired_z(measured, exact),
                    }
                )
            rows.append(row)
    return rows


@dataclass(frozen=True, kw_only=True)
class AdvisorCheck(SavedRecord):
    """The advisor's constants against the exact ones (``advisor_check``; advisor_check.json of
    scripts/estimator_table.py)."""

    exact: dict  # the theory's scaling constants, then c1_fixed_prompts and both K* from it
    estimated: dict  # the advice's pooled values, as saved
    ci95: dict  # the advice's 95% intervals, as saved
    exact_inside_ci95: dict[str, bool]  # per constant with an interval: whether the exact target lies in it
    per_K: dict  # the advice's per-K constants, as saved


def advisor_check(theory: dict, run: dict) -> AdvisorCheck | None:
    """Exact c1, c2, c3, K* against the run's group_size_advisor (pooled, with bootstrap 95% intervals).

    ``c1_fixed_prompts`` is what the advisor's c1 estimates when the prompts are held fixed (batches of
    ``--c1_batch`` consecutive prompts, (n-1) denominator: ``one_token.batch_c1_target``); ``c1`` is the
    population value over all these prompts (1/n denominator) that the theory JSON reports.
    """
    advice = run.get("group_size_advisor")
    if not advice:
        return None
    exact = dict(theory["scaling_constants"])
    target = batch_c1_target(theory["g_gram"], int(run.get("config", {}).get("c1_batch", 16)))
    exact["c1_fixed_prompts"] = target
    exact["K_star_paper_fixed_prompts"] = float(paper_k_star(target, exact["c3"]))
    exact["K_star_exact_fixed_prompts"] = float(k_star(target, exact["c3"]))
    targets = {
        "c1": target,
        "c2": exact["c2"],
        "c3": exact["c3"],
        "K_star_paper": exact["K_star_paper_fixed_prompts"],
        "K_star_exact": exact["K_star_exact_fixed_prompts"],
    }
    ci = advice["ci95"]
    bounds = {n: interval_of(ci.get(n)) for n in targets}  # "inf" ends as inf; malformed -> None
    inside = {n: bool(b[0] <= targets[n] <= b[1]) for n, b in bounds.items() if b and not math.isnan(targets[n])}
    return AdvisorCheck(
        exact=exact, estimated=advice["pooled"], ci95=ci, exact_inside_ci95=inside, per_K=advice["per_K"]
    )


def _fmt(value: float) -> str:
    """Four significant figures, or '-' for a missing value."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def markdown(rows: list[dict], check: AdvisorCheck | None) -> str:
    """The comparison as markdown tables (estimators, then the advisor's constants)."""
    lines = [
        "| K | estimator | tr Cov exact | tr Cov MC ± 95% | z | bias² exact | bias² MC ± 95% | z "
        "| MSE exact | MSE MC ± 95% | z |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [str(r["K"]), est.get(r["estimator"]).label]
        for q in MC_FIELDS:
            cells += [_fmt(r[f"exact_{q}"]), f"{_fmt(r[f'mc_{q}'])} ± {_fmt(r[f'mc_{q}_ci95'])}", _fmt(r[f"z_{q}"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"± = the run's 1.96 sd / sqrt(T) across prompts; z = paired (MC - exact) per prompt / its "
        f"standard error (|z| < {Z95:.2f} in about 95% of correct runs).",
    ]
    if check:
        e, p, ci = check.exact, check.estimated, check.ci95
        lines += [
            "",
            "| constant | exact (these prompts) | exact, fixed-prompt target of the estimator "
            "| advisor estimate | bootstrap 95% interval |",
            "|---|---|---|---|---|",
        ]
        for name, fixed in (
            ("c1", e["c1_fixed_prompts"]),
            ("c2", e["c2"]),
            ("c3", e["c3"]),
            ("K_star_paper", e["K_star_paper_fixed_prompts"]),
            ("K_star_exact", e["K_star_exact_fixed_prompts"]),
        ):
            interval = ci.get(name)
            lines.append(
                f"| {name} | {_fmt(e[name])} | {_fmt(fixed)} | {_fmt(p[name])} | "
                + (f"[{_fmt(interval[0])}, {_fmt(interval[1])}]" if interval else "-")
                + " |"
            )
    return "\n".join(lines) + "\n"
