"""The group-size advisor against training (scripts/k_validation.sh): data subsets, predictions, summary, figure.

  python scripts/k_validation.py subset DATA_DIR OUT_DIR --kinds division --n_test 200
  python scripts/k_validation.py predict RUN.json --name S --out prediction_S.json
  python scripts/k_validation.py pilot pilot_runs.csv [--min_gain 0.03]   # exit 1: the pilot is flat
  python scripts/k_validation.py summarize --setting S runs.csv prediction_S.json START ... --out_dir DIR
  python scripts/k_validation.py adaptive adaptive_runs.csv sweep_runs.csv --name S --out_dir DIR

Per run the metric is the mean held-out greedy accuracy over the validation steps after step 0; which runs count
is grpo_mse.training.runs_table's one rule (select_runs). The statistics are studies.advisor.k_validation's
(described there), the figures studies.advisor.k_validation_figures's, the subsets and per-run means
studies.advisor.training_runs's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace

from grpo_mse import cli
from grpo_mse.errors import require
from grpo_mse.flags import Flags, option, parse_command
from studies.advisor.training_runs import KINDS, subset

METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"


@dataclass(kw_only=True)
class SubsetConfig(Flags):
    """restrict a prepared arithmetic dataset to some problem kinds"""

    data_dir: str = option(positional=True, help="a prepared arithmetic dataset (train.parquet, test.parquet)")
    out_dir: str = option(positional=True, help="where the restricted dataset goes")
    kinds: str = option(choices=KINDS, help="the problem kinds kept")
    n_test: int = option(200, minimum=1, help="test rows kept (the first ones)")


@dataclass(kw_only=True)
class PredictConfig(Flags):
    """the advisor's prediction from a run_tracecov JSON, with the time"""

    run_json: str = option(positional=True, help="main JSON of run_tracecov.py (with its group_size_advisor)")
    name: str = option(help="the setting's name")
    out: str = option(help="JSON file for the prediction")


@dataclass(kw_only=True)
class PilotConfig(Flags):
    """exit 0 if the pilot runs learn (mean gain >= --min_gain), else exit 1"""

    runs_csv: str = option(positional=True, help="the pilot runs (CSV of collect_runs.py)")
    min_gain: float = option(0.03, type=cli.number(), help="mean accuracy gain that counts as learning")
    metric: str = option(METRIC, help="the accuracy compared")


@dataclass(kw_only=True)
class SummarizeConfig(Flags):
    """summary.json and one figure per setting"""

    setting: list[list[str]] = option(
        nargs=4,
        action="append",
        metavar=("NAME", "RUNS_CSV", "PREDICTION_JSON", "STARTED_AT"),
        help="one setting: its runs, the advisor's prediction, when its sweep started",
    )
    metric: str = option(METRIC, help="the accuracy compared")
    out_dir: str = option(help="where summary.json and the figures go")
    protocol_commit: str | None = option(
        None, help="git hash of the commit holding the protocol the sweep followed (recorded in summary.json)"
    )


@dataclass(kw_only=True)
class AdaptiveConfig(Flags):
    """adaptive-K runs against the fixed-K sweep: summary JSON, choices CSV, figure"""

    adaptive_csv: str = option(positional=True, help="the adaptive-K runs (CSV of collect_runs.py)")
    sweep_csv: str = option(positional=True, help="the fixed-K sweep's runs")
    name: str = option(help="the setting's name")
    metric: str = option(METRIC, help="the accuracy compared")
    started_at: str | None = option(None, help="when the adaptive runs started (recorded in the summary)")
    out_dir: str = option(help="where the summary JSON, choices CSV and figure go")


COMMANDS = {
    "subset": SubsetConfig,
    "predict": PredictConfig,
    "pilot": PilotConfig,
    "summarize": SummarizeConfig,
    "adaptive": AdaptiveConfig,
}


def main(argv=None) -> int:
    command, args = parse_command(COMMANDS, argv, description=__doc__)
    # numpy, pandas and matplotlib load after the flags are checked (--help stays fast)
    from grpo_mse.tables.outputs import read_json, to_json, write_atomic, write_csv
    from grpo_mse.training.runs_table import read_training
    from studies.advisor import k_validation as kv
    from studies.advisor.k_validation_figures import plot_adaptive, plot_setting, plot_settings
    from studies.advisor.sweep_stats import best_k_draws, best_k_shares
    from studies.advisor.training_runs import ADAPTIVE_FIELDS, adaptive_k, pilot_gain, run_means

    if command == "subset":
        counts = subset(args.data_dir, args.out_dir, args.kinds, args.n_test)
        print(f"{args.kinds}: {counts['train']} training, {counts['test']} test rows -> {args.out_dir}")
    elif command == "pilot":
        gain = pilot_gain(read_training(args.runs_csv, args.metric), args.metric)
        learns = gain >= args.min_gain
        print(f"{args.runs_csv}: mean gain {gain:+.3f} ({'learns' if learns else 'flat'}: threshold {args.min_gain})")
        return 0 if learns else 1
    elif command == "adaptive":
        adaptive, sweep = read_training(args.adaptive_csv, args.metric), read_training(args.sweep_csv, args.metric)
        runs, fixed = run_means(adaptive, args.metric), run_means(sweep, args.metric)
        summary = kv.adaptive_summary(runs, fixed, adaptive_k(adaptive), args.metric, args.name, args.started_at)
        os.makedirs(args.out_dir, exist_ok=True)
        columns = ["seed", "step", *ADAPTIVE_FIELDS]
        write_csv(os.path.join(args.out_dir, f"k_chosen_{args.name}.csv"), summary.K_chosen, columns)
        plot_adaptive(summary.to_json(), os.path.join(args.out_dir, f"adaptive_{args.name}.png"))
        write_atomic(os.path.join(args.out_dir, f"summary_{args.name}.json"), to_json(summary.to_json(), indent=1))
        a = summary.adaptive
        print(f"{args.name}: adaptive K {a.mean:.3f} [{a.ci95[0]:.3f}, {a.ci95[1]:.3f}], {a.n_seeds} seeds")
        for k, c in summary.adaptive_minus_fixed.items():
            f = summary.fixed[k]
            print(
                f"  fixed K={k}: {f.mean:.3f} [{f.ci95[0]:.3f}, {f.ci95[1]:.3f}]; adaptive - fixed "
                f"{c['difference']:+.3f} [{c['welch_ci95'][0]:+.3f}, {c['welch_ci95'][1]:+.3f}]"
            )
    elif command == "predict":
        cli.writable_file(args.out, "--out")
        run = read_json(args.run_json, ("group_size_advisor",), "run_tracecov result")
        pred = kv.predict(run, args.name)
        write_atomic(args.out, to_json(pred.to_json(), indent=1))
        print(f"{args.name}: {kv.describe_prediction(pred)} (written {pred.written_at}) -> {args.out}")
    else:
        require(
            args.protocol_commit is None or re.fullmatch(r"[0-9a-f]{7,40}", args.protocol_commit) is not None,
            f"--protocol_commit {args.protocol_commit!r}: give a git commit hash (7 to 40 hex digits)",
        )
        settings, draws = [], []
        names = [setting[0] for setting in args.setting]
        require(len(set(names)) == len(names), f"--setting names repeat: {names}")
        os.makedirs(args.out_dir, exist_ok=True)
        for name, csv, pred_path, started_at in args.setting:
            pred = kv.Prediction.from_json(read_json(pred_path, ("c1", "c2", "c3"), "advisor prediction"), pred_path)
            runs = run_means(read_training(csv, args.metric), args.metric)
            summary = kv.setting_summary(name, runs, pred, started_at, args.metric)
            draws.append(best_k_draws(runs, seed=len(draws)))  # independent resampling per setting
            summary = replace(summary, sweep=replace(summary.sweep, best_K_bootstrap=best_k_shares(draws[-1])))
            plot_setting(summary.to_json(), os.path.join(args.out_dir, f"sweep_{name}.png"), runs)
            settings.append(summary)
            sw = summary.sweep
            print(
                f"{name}: advisor {kv.describe_prediction(pred)}; "
                f"sweep best K {sw.best_K}, separated {sw.separated_pairs}, Spearman "
                f"{summary.rank_correlation.spearman_predicted_error_vs_metric:.2f}"
            )
        comparisons = [
            kv.compare(settings[i], settings[j], draws[i], draws[j])
            for i in range(len(settings))
            for j in range(i + 1, len(settings))
        ]
        for c in comparisons:
            print(
                f"{c.settings[0]} -> {c.settings[1]}: advisor K* {c.advisor_direction:+d}, sweep best K "
                f"{c.sweep_direction:+d}; bootstrap shares {c.bootstrap_best_K_shares}"
            )
        if len(settings) > 1:
            plot_settings([s.to_json() for s in settings], os.path.join(args.out_dir, "sweep_settings.png"))
        write_atomic(
            os.path.join(args.out_dir, "summary.json"),
            to_json(
                {
                    "settings": [s.to_json() for s in settings],
                    "comparisons": [c.to_json() for c in comparisons],
                    **({"protocol_commit": args.protocol_commit} if args.protocol_commit else {}),
                },
                indent=1,
            ),
        )


if __name__ == "__main__":
    cli.run(main)
