"""Why a run's MSEs are the size they are, against the paper's: response lengths, score norms by length, and the
oracle baseline's MSE predicted from V (1 - V) and the measured norms (issue 55, item 2).

Inputs: a tracecov run (its main JSON; the per-prompt CSV beside it holds each prompt's mean response length,
EOS and cut shares, V and MSEs), an ``explain_baseline.py --per_position`` diagnostic of the same model and table
(per sample: length, reward, ||s||^2 and each token's own ||s_t||^2), and the paper's Figure-4 values.

What it computes, each with the numbers it rests on:
- lengths: the run's mean response length over prompts, its EOS and cut shares;
- norms by length: mean ||s||^2 per response length L, its fit a L through 0 (a: the mean squared score norm a
  generated token adds) and the cross terms' share of ||s||^2 (0: the tokens' scores add like independent terms);
- the oracle prediction: per diagnostic prompt K MSE_oracle is E[(G - V)^2 ||s||^2] less ||g||^2 (exact; ||g||^2,
  the policy gradient's squared norm, is left out, so the prediction is an upper bound up to sampling noise),
  checked against the run's measured oracle MSE on the prompts both measured;
- the paper's gap: the paper's oracle MSE over ours per K, the largest factor V (1 - V) can explain (the paper's
  prompts at V = 1/2 against our mean V (1 - V)), and the response length at which the fitted norms would close the
  rest (if nothing else differs).
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from dataclasses import dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import read_json, write_json


@dataclass(kw_only=True)
class ScaleAccountConfig(Flags):
    """The run, the diagnostic, the paper's values and where the account goes."""

    run: str = option(help="the tracecov run's main JSON (its *_per_prompt.csv beside it)")
    diagnostic: str = option(help="explain_baseline.py --per_position JSON of the same model and table")
    paper: str = option("results/paper_figure4.csv", help="the paper's Figure-4 values (model, K, estimator, mse)")
    paper_model: str = option("Instruct", help="the paper's row to compare with")
    out: str = option(help="output JSON file (replaced if it exists)")

    def __post_init__(self) -> None:
        super().__post_init__()
        cli.writable_file(self.out, "--out")


def per_prompt_rows(run_json: str) -> list[dict]:
    """The run's per-prompt CSV rows (one per prompt, K and estimator), numbers as floats."""
    path = run_json[: -len(".json")] + "_per_prompt.csv"
    require(os.path.isfile(path), f"--run {run_json}: no {os.path.basename(path)} beside it")
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    require(bool(rows) and "mean_new_tokens" in rows[0], f"{path}: no mean_new_tokens column (a run before it)")
    for row in rows:
        for key in ("K", "mse", "V_oracle", "mean_new_tokens", "share_eos", "share_cut"):
            row[key] = float(row[key]) if row[key] not in ("", None) else math.nan
    return rows


def norms_by_length(samples: list[dict]) -> dict:
    """Per length L: n, mean ||s||^2, mean per-token ||s_t||^2; the fit mean ||s||^2 = a L through 0 weighted by n;
    the cross terms' share of sum ||s||^2."""
    lengths = sorted({s["length"] for s in samples if s["length"]})
    table = []
    for length in lengths:
        group = [s for s in samples if s["length"] == length]
        tokens = [t for s in group for t in (s.get("position_norm2") or [])]
        table.append(
            {
                "length": length,
                "n": len(group),
                "mean_norm2": statistics.fmean(s["norm2"] for s in group),
                "mean_token_norm2": statistics.fmean(tokens) if tokens else None,
            }
        )
    n = np.array([e["n"] for e in table], float)
    x, y = np.array([e["length"] for e in table], float), np.array([e["mean_norm2"] for e in table])
    slope = float((n * x * y).sum() / (n * x * x).sum())  # weighted least squares through the origin
    crossed = [s for s in samples if s.get("cross") is not None]
    share = sum(s["cross"] for s in crossed) / sum(s["norm2"] for s in crossed) if crossed else None
    return {"by_length": table, "norm2_per_token_fit": slope, "cross_share": share}


def paper_values(path: str, model: str) -> dict[tuple[str, int], float]:
    """{(estimator, K): mse} of the paper's row ``model`` (estimators named as ours: naive, grpo, oracleV)."""
    names = {"vanilla": "naive", "grpo": "grpo", "oracle": "oracleV"}
    with open(path, encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["model"] == model]
    require(bool(rows), f"--paper {path}: no row for model {model!r}")
    return {(names.get(r["estimator"].lower(), r["estimator"]), int(r["K"])): float(r["mse"]) for r in rows}


def account(run_json: str, diagnostic_json: str, paper_csv: str, paper_model: str) -> dict:
    rows = per_prompt_rows(run_json)
    diagnostic = read_json(diagnostic_json, ("per_prompt", "per_sample"), "explain_baseline.py --per_position")
    samples = diagnostic["per_sample"]
    ks = sorted({int(r["K"]) for r in rows})
    oracle = {k: {r["id"]: r for r in rows if int(r["K"]) == k and r["estimator"] == "oracleV"} for k in ks}
    first = list(oracle[ks[0]].values())
    lengths = {name: statistics.fmean(r[name] for r in first) for name in ("mean_new_tokens", "share_eos", "share_cut")}
    norms = norms_by_length(samples)
    measured = {k: statistics.fmean(r["mse"] for r in oracle[k].values()) for k in ks}
    predictions = []
    for k in ks:
        shared = [p for p in diagnostic["per_prompt"] if str(p["id"]) in oracle[k]]
        predicted = [p["E_oracle_term"] / k for p in shared]
        observed = [oracle[k][str(p["id"])]["mse"] for p in shared]
        predictions.append(
            {
                "K": k,
                "prompts_in_both": len(shared),
                "predicted_mean": statistics.fmean(predicted) if shared else None,
                "measured_mean": statistics.fmean(observed) if shared else None,
                "diagnostic_predicted_mean_all": statistics.fmean(
                    p["E_oracle_term"] / k for p in diagnostic["per_prompt"]
                ),
                "run_measured_mean_all": measured[k],
            }
        )
    paper = paper_values(paper_csv, paper_model)
    mean_vv = statistics.fmean(r["V_oracle"] * (1 - r["V_oracle"]) for r in first)
    gaps = []
    for k in ks:
        if ("oracleV", k) in paper:
            factor = paper[("oracleV", k)] / measured[k]
            rest = factor / (0.25 / mean_vv)  # what V (1 - V) at its largest cannot explain
            gaps.append(
                {
                    "K": k,
                    "paper_over_ours": factor,
                    "v_mix_at_most": 0.25 / mean_vv,
                    "left_after_v_mix": rest,
                    "length_to_close_it": rest * lengths["mean_new_tokens"],  # norms linear in length (the fit)
                }
            )
    return {
        "run": run_json,
        "diagnostic": diagnostic_json,
        "lengths": lengths,
        "norms": norms,
        "oracle_prediction": predictions,
        "paper_gap": gaps,
        "mean_V_times_1_minus_V": mean_vv,
    }


def describe(result: dict) -> list[str]:
    lengths, norms = result["lengths"], result["norms"]
    cross = norms["cross_share"]
    lines = [
        f"responses: {lengths['mean_new_tokens']:.2f} tokens on average ({lengths['share_eos']:.1%} ended by EOS, "
        f"{lengths['share_cut']:.1%} cut)",
        f"||s||^2 ~ {norms['norm2_per_token_fit']:.4g} x length (fit over "
        f"{sum(e['n'] for e in norms['by_length'])} samples); cross terms "
        + ("not measured" if cross is None else f"{cross:.1%} of ||s||^2"),
    ]
    for p in result["oracle_prediction"]:
        if p["prompts_in_both"]:
            lines.append(
                f"K={p['K']}: oracle MSE predicted {p['predicted_mean']:.4g}, measured {p['measured_mean']:.4g} on the "
                f"{p['prompts_in_both']} prompts both measured"
            )
    for g in result["paper_gap"]:
        lines.append(
            f"K={g['K']}: paper / ours {g['paper_over_ours']:.1f}x; V(1-V) explains at most {g['v_mix_at_most']:.2f}x; "
            f"the rest ({g['left_after_v_mix']:.1f}x) at responses of about {g['length_to_close_it']:.0f} tokens"
        )
    return lines


def main(argv=None) -> None:
    args = ScaleAccountConfig.from_argv(argv, description=__doc__)
    result = account(args.run, args.diagnostic, args.paper, args.paper_model)
    write_json(args.out, result)
    for line in describe(result):
        print(line)
