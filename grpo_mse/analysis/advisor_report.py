"""The group-size advisor's printout: constants, K* and best allowed K with their intervals, rounded, and their
simulated coverage (``describe``), from saved advice.
"""

from __future__ import annotations

import math
from dataclasses import replace

from grpo_mse.analysis import bootstrap
from grpo_mse.analysis.coverage_calibration import CALIBRATED
from grpo_mse.analysis.error_model import advice_status, interval_of, number, rounded


def coverage_text(calibration: dict | None, name: str) -> str:
    """ " (simulated coverage 96% +-1.1%)" or, over several tail shapes that fit this run, " (simulated coverage
    95-99% +-1.2%)"; " (coverage unknown)" when no cell applies; "" for c2 (not calibrated) and advice saved
    without a calibration."""
    name = "K_star_exact" if name == "K_star_paper" else name  # sqrt(c3/c1) = K*_exact - 1: the same interval
    if not calibration or name not in CALIBRATED:
        return ""
    if calibration.get("status") != "calibrated" or name not in calibration.get("coverage", {}):
        return " (coverage unknown)"
    c = calibration["coverage"][name]
    low, high = round(100 * c["low"]), round(100 * c["high"])
    span = f"{low}%" if low == high else f"{low}-{high}%"
    return f" (simulated coverage {span} +-{c['mc_se']:.1%})"


def calibration_line(calibration: dict | None) -> str:
    """Which calibration cells the coverage comes from, or why it is unknown."""
    if not calibration:
        return ""
    text = (
        f"\n  T = {calibration.get('T')}, tail index of c2 {rounded(calibration.get('tail_index'))} (largest "
        f"prompt's share {rounded(calibration.get('largest_prompt_share'))}): "
    )
    if calibration.get("status") != "calibrated":
        return text + f"coverage unknown ({calibration.get('reason', 'no calibration cell applies')})"
    grid = sorted({c["T"] for c in calibration["cells"]})
    where = f"T={grid[0]}" if len(grid) == 1 else f"T={grid[0]} and {grid[1]} (this T lies between)"
    cells = ", ".join(dict.fromkeys(c["tail"] for c in calibration["cells"]))
    return text + (
        f"coverage simulated at {where} for the tail shapes that fit ({cells}; "
        "scripts/coverage_heavy_tails.py; +-: Monte Carlo s.e.)"
    )


def widening_text(advice: dict) -> str:
    """ "; c1, c2, c3, K* widened for heavy tails" when some interval's ends were moved out, else ""."""
    stretched = {name: w for name, w in (advice.get("interval_widening") or {}).items() if list(w) != [0.0, 0.0]}
    if not stretched:
        return ""
    names = ", ".join("K*" if name == "K_star_exact" else name for name in stretched)
    return f"; {names} widened for heavy tails"


def describe(advice: dict) -> str:
    """Advisor printout: constants, paper and exact K*, best allowed K (only where identified), each with its 95%
    interval, rounded, and its simulated coverage at this run's T and tail (or "unknown"); where K is not
    identified, "not identified" with the way the data lean and the K within 10% of the smallest error."""
    pooled, ci = advice["pooled"], advice["ci95"]
    calibration = advice.get("simulated_coverage")

    def item(name):
        low, high = interval_of(ci.get(name)) or (None, None)
        flag = ""
        if name in ("c1", "c2", "c3"):  # >= 0: clipped and flagged, also in advice saved before the clipping
            saved = (advice.get("ci95_below_zero") or {}).get(name)
            summary = bootstrap.at_least_zero(
                bootstrap.Summary(estimate=number(pooled.get(name)), ci95=None if low is None else [low, high])
            )
            low, high = summary.ci95 or (low, high)
            flag = bootstrap.below_zero_flag(replace(summary, **({saved: True} if saved else {})))
        return f"{rounded(pooled.get(name))} [{rounded(low)}, {rounded(high)}]{flag}" + coverage_text(calibration, name)

    slope_line = ""
    if advice.get("c3_slope_per_K"):
        s = advice["c3_slope_per_K"]
        slope_line = (
            "\n  c3 per K: "
            + ", ".join(f"K={k}: {rounded(v['c3']['estimate'])}" for k, v in advice["per_K"].items())
            + f"; slope in K {rounded(s['estimate'])} [{', '.join(rounded(v) for v in s['ci95'] or [])}]"
            " (0 under the 1/(K(K-1)) law)"
        )
    bad = advice["degenerate_replicates"]
    now = advice_status(advice)
    if now.identified:
        small = " (below 2: use the smallest allowed K)" if now.K_star_exact < 2 else ""
        stars = (
            f"exact K* = 1+sqrt(c3/c1) = {item('K_star_exact')}{small}; paper's sqrt(c3/c1) = {item('K_star_paper')}"
        )
    else:
        positive = all(number(pooled.get(n)) > 0 and math.isfinite(number(pooled.get(n))) for n in ("c1", "c3"))
        estimate = f" (point estimate {item('K_star_exact')})" if positive else ""
        stars = f"exact K* = 1+sqrt(c3/c1): not identified{estimate}"
    if now.K_best is not None:
        best = f"best K in {advice['allowed_K']} = {now.K_best} ({now.message.split('; ', 1)[-1]})"
    else:
        best = f"K in {advice['allowed_K']}: {now.message}"
    measured = ""
    if advice.get("measured_curve"):
        from grpo_mse.analysis.measured_curve import MeasuredCurve
        from grpo_mse.analysis.measured_curve import describe as describe_curve

        measured = "\n" + describe_curve(MeasuredCurve.from_json(advice["measured_curve"]))
    return (
        f"group-size advisor (95% joint prompt bootstrap{widening_text(advice)}, {bad['n_boot']} replicates; "
        f"{bad['c1<=0']} with c1<=0, {bad['c3<=0']} with c3<=0):\n"
        f"  c1={item('c1')} c2={item('c2')} c3={item('c3')}\n"
        f"  {stars};\n  {best}" + slope_line + calibration_line(calibration) + measured
    )
