"""Does the advisor's error model extrapolate? Fit c1, c2, c3 on small K, predict the budgeted error at large K,
measure it there, with joint intervals (issue 27 item 4).

One run_tracecov run over K_list = FIT + CHECK (run_tracecov's flags after ``--``; --K_list is set here). From
its per-prompt records and c1 batches, with one joint prompt bootstrap (the same resampled prompts for all):
- predicted(K) = (c1 K + c2 + c3/(K - 1)) / N, c1, c2, c3 the plain means of the per-K constants over FIT (as
  the advisor pools them);
- measured(K) = (K/N) (c1_K + mean_x tr Cov_GRPO(x, K)) = (c1_K K + c2_K + c3_K/(K - 1)) / N from K's own
  samples and c1 batches alone;
- measured / predicted with its 95% BCa interval: 1 inside means the model's extrapolation is not refuted.

  python scripts/advisor_check.py --out results/advisor_check/tiny_policy.json -- --model assets/tiny_policy \
      --oracle_table results/demo/oracle_v_n256_tiny_policy_<stamp>.jsonl --T 48 --M 8 \
      --max_new_tokens 32 --device cpu --dtype fp32 --skip_plot --save_json outputs/advisor_check
"""

import shlex
from dataclasses import dataclass

import numpy as np

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option
from grpo_mse.tables.outputs import write_json

NAMES = ("c1", "c2", "c3")


def constants_at(records: list, batches: list, position: dict, weights: np.ndarray) -> np.ndarray:
    """[3, R] c1, c2, c3 of one K in every bootstrap row (c2, c3: weighted means of the per-prompt values);
    ``records``: PromptRecords, ``batches``: C1BatchRecords (grpo_mse.tables.records)."""
    from grpo_mse.analysis import bootstrap, error_model

    c2, c3 = (
        bootstrap.weighted_mean(
            weights,
            bootstrap.column(records, position, lambda r, j=j: error_model.per_prompt_constants(r)[j]),
        )
        for j in (0, 1)
    )
    return np.stack([error_model.batch_c1(weights, batches, position), c2, c3])


def budgeted_error(c1, c2, c3, k: int, budget: int):
    """(c1 K + c2 + c3/(K - 1)) / N: the exact error of one GRPO step at budget N (error_model.exact_error)."""
    return (c1 * k + c2 + c3 / (k - 1)) / budget


def extrapolation(records_by_k, batches_by_k, fit, check, budget: int, n_boot: int, seed: int) -> dict:
    """Predicted and measured budgeted error at each K of ``check`` from the constants fitted on ``fit``."""
    from grpo_mse.analysis import bootstrap

    prompts, position = bootstrap.prompt_columns(records_by_k)
    weights = bootstrap.prompt_weights(len(prompts), n_boot, seed)
    per_k = {k: constants_at(records_by_k[k], batches_by_k.get(k, []), position, weights) for k in (*fit, *check)}
    with np.errstate(invalid="ignore"):
        pooled = np.nanmean(np.stack([per_k[k] for k in fit]), axis=0)  # [3, R]
    out = {
        "fit_K": list(fit),
        "fitted": {name: bootstrap.summarise(pooled[i], weights).to_json() for i, name in enumerate(NAMES)},
        "check": {},
    }
    for k in check:
        predicted = budgeted_error(*pooled, k, budget)
        measured = budgeted_error(*per_k[k], k, budget)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = measured / predicted
        out["check"][str(k)] = {
            "predicted": bootstrap.summarise(predicted, weights).to_json(),
            "measured": bootstrap.summarise(measured, weights).to_json(),
            "measured_over_predicted": bootstrap.summarise(ratio, weights).to_json(),
            "measured_constants": {
                name: bootstrap.summarise(per_k[k][i], weights).to_json() for i, name in enumerate(NAMES)
            },
        }
    return out


@dataclass(kw_only=True)
class AdvisorCheckConfig(Flags):
    """The K to fit on and to predict, the bootstrap size and the output (run_tracecov's flags follow ``--``)."""

    out: str = option(help="JSON file for the check")
    fit: list[int] = option([2, 4, 8], minimum=2, help="K to fit on")
    check: list[int] = option([16, 32, 64], minimum=2, help="K to predict")
    n_boot: int = option(2000, minimum=100, help="bootstrap replicates")


def main(argv=None) -> None:
    argv = cli.arguments(argv)
    own, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = AdvisorCheckConfig.from_argv(own, description=__doc__)
    require(not set(args.fit) & set(args.check), f"--fit {args.fit} and --check {args.check} overlap")
    require(len(args.fit) >= 1 and "--K_list" not in rest, "--K_list is set from --fit and --check; leave it out")
    cli.writable_file(args.out, "--out")
    from grpo_mse.config.gradient_evaluation import TracecovConfig

    k_list = sorted({*args.fit, *args.check})
    config = TracecovConfig.from_argv([*rest, "--K_list", *map(str, k_list)], description="run_tracecov.py flags")
    from grpo_mse.runs.tracecov import TracecovRun  # torch loads after the flags are checked

    run = TracecovRun.start(config)
    records_by_k = run.sweep()
    batches_by_k = run.advisor.batches_by_k()
    outcome = run.write_outputs(records_by_k)
    run.close()
    result = extrapolation(records_by_k, batches_by_k, args.fit, args.check, config.budget, args.n_boot, config.seed)
    result.update(
        {
            "budget": config.budget,
            "tracecov_run": outcome.json_path,
            "command": "python scripts/advisor_check.py " + shlex.join(argv),
            "note": __doc__.split("\n\n")[1],  # saved: the module docstring's 2nd paragraph is part of the output
        }
    )
    write_json(args.out, result)
    for k, c in result["check"].items():
        ratio = c["measured_over_predicted"]
        print(
            f"K={k}: predicted {adv_text(c['predicted'])}, measured {adv_text(c['measured'])}, "
            f"measured/predicted {adv_text(ratio)}"
        )
    print(f"-> {args.out}")


def adv_text(summary: dict) -> str:
    from grpo_mse.analysis.bootstrap import rounded

    low, high = summary["ci95"] or (None, None)
    return f"{rounded(summary['estimate'])} [{rounded(low)}, {rounded(high)}]"
