"""Size a Figure-4 run from a pilot: the prompt-bootstrap relative standard error of each MSE ratio, and the
T x M its 95% interval needs for a given half-width.

From a pilot run's per-prompt CSV (run_tracecov.py's ``*_per_prompt.csv``): per K, the ratio of the estimators'
mean MSE over prompts (the run's own ratio of means), resampled over prompts (--resamples, --seed); its relative
standard error r = sd(resampled ratios) / ratio. A run of T prompts and M groups is expected to give a 95%
half-width of 1.96 r sqrt(T_pilot M_pilot / (T M)) (the 1 / sqrt(T M) scaling is optimistic about M: the spread
between prompts does not shrink with M), so a half-width h needs T M >= T_pilot M_pilot (1.96 r / h)^2.

  python scripts/pilot_power.py --per_prompt PILOT_per_prompt.csv --M 4 --half_width 0.10 --out power.json
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json
from studies.audits.per_prompt import mse_table

RATIOS = (("grpo", "oracleV"), ("naive", "oracleV"), ("naive", "grpo"))


@dataclass(kw_only=True)
class PilotPowerConfig(Flags):
    """The pilot's per-prompt CSV and M, the half-width wanted, the bootstrap and the output."""

    per_prompt: str = option(help="the pilot's *_per_prompt.csv (run_tracecov.py)")
    M: int = option(minimum=2, help="the pilot's groups per prompt")
    half_width: float = option(0.10, above=0, help="relative 95%% half-width wanted")
    resamples: int = option(20000, minimum=100, help="bootstrap resamples over prompts")
    seed: int = option(0, help="bootstrap seed")
    out: str | None = option(None, help="also write the report as JSON here")


def relative_se(top: np.ndarray, bottom: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """(ratio of means, its prompt-bootstrap relative standard error)."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(top), size=(resamples, len(top)))
    ratios = top[picks].mean(axis=1) / bottom[picks].mean(axis=1)
    ratio = top.mean() / bottom.mean()
    return float(ratio), float(np.std(ratios[np.isfinite(ratios)], ddof=1) / ratio)


def main(argv=None) -> None:
    args = PilotPowerConfig.from_argv(argv, description=__doc__)
    report = {"per_prompt": args.per_prompt, "M": args.M, "half_width": args.half_width, "ratios": []}
    for k, mse in sorted(mse_table(args.per_prompt).items()):
        prompts = len(next(iter(mse.values())))
        for top, bottom in RATIOS:
            if top not in mse or bottom not in mse:
                continue
            ratio, rse = relative_se(mse[top], mse[bottom], args.resamples, args.seed)
            needed = math.ceil(prompts * args.M * (1.96 * rse / args.half_width) ** 2)
            report["ratios"].append(
                {
                    "K": k,
                    "ratio": f"{top}/{bottom}",
                    "value": ratio,
                    "relative_se": rse,
                    "pilot_T": prompts,
                    "T_times_M_needed": needed,
                }
            )
            print(
                f"K {k} {top}/{bottom}: {ratio:.3f}, relative se {rse:.3f}; T x M >= {needed} for +-{args.half_width:g}"
            )
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    cli.run(main)
