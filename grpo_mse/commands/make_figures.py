"""Draw the paper's figures from saved results only (nothing is recomputed).

Figure 4: --tracecov RUN.json [RUN.json ...]  -> one MSE-vs-K panel per run + a GRPO/oracle ratio panel
          --paper CSV overlays the published values (paper_figure4.csv) as an extra panel set
          --theory THEORY.json overlays exact curves (scripts/exact_theory.py) on the --tracecov panels
Advisor:  --advisor RUN.json [--budget N]     -> predicted error against K with K* marked (N: the run's)
Figure 5 / Table 2: --training_csv runs.csv   -> accuracy vs K at several steps + a markdown table
"""

import csv
import json
import math
import os
import sys
from dataclasses import dataclass

from grpo_mse import cli
from grpo_mse.errors import UsageError, require
from grpo_mse.flags import Flags, option
from grpo_mse.gradients import estimators as est
from grpo_mse.tables.outputs import read_json


@dataclass
class FiguresConfig(Flags):
    """Which saved results to draw and where the figures go."""

    tracecov: list[str] = option([], nargs="*", help="main JSON files written by run_tracecov.py")
    labels: list[str] | None = option(None, nargs="*", help="panel titles, one per --tracecov file")
    advisor: str | None = option(None, help="main JSON with group_size_advisor: draw the bound and K*")
    budget: int | None = option(
        None,
        minimum=2,
        help="sequences per step N for --advisor (default: the run's own, "
        "saved in its JSON; a different N is named in the figure's title)",
    )
    theory: str | None = option(
        None, help="theory JSON of scripts/exact_theory.py: dashed exact curves on the --tracecov panels"
    )
    paper: str | None = option(None, help="paper_figure4.csv: add the published Figure 4 panels")
    paper_models: list[str] | None = option(
        None, nargs="+", help="with --paper: only these models' panels, e.g. Instruct (default: every model)"
    )
    training_csv: str | None = option(None, help="CSV of training runs written by collect_runs.py")
    metric: str | None = option(None, help="metric of --training_csv to plot (default: first val accuracy)")
    steps: list[int] | None = option(
        None, nargs="*", minimum=0, help="training steps drawn in Figure 5; Table 2 compares K at the largest"
    )
    include_incomplete: bool = option(
        False, help="Figure 5 / Table 2: include interrupted, failed and truncated runs (footnoted)"
    )
    out_dir: str = option("results/figures", help="output folder")
    name: str = option("figure4", help="file stem of the Figure-4 outputs")
    share_y: bool = option(
        False,
        help="Figure 4: one y scale and one y label for every MSE panel (runs compared in the same units, e.g. ours "
        "beside --paper; by default each panel has its own scale)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # bounds
        require(
            bool(self.tracecov or self.paper or self.training_csv or self.advisor),
            "give --tracecov files, --paper, --advisor and/or --training_csv",
        )
        require(self.theory is None or bool(self.tracecov), "--theory needs --tracecov runs to overlay")
        require(self.paper_models is None or bool(self.paper), "--paper_models needs --paper")
        require(self.labels is None or len(self.labels) == len(self.tracecov), "--labels needs one label per file")
        require(
            self.advisor is None or self.budget is None or self.budget % 2 == 0,
            f"--budget {self.budget} is odd: no power-of-two group size K divides it; give an even --budget",
        )
        require(
            bool(self.name) and os.path.basename(self.name) == self.name and self.name not in (".", ".."),
            f"--name {self.name!r} must be a file stem without a folder (e.g. --name figure4); "
            "choose the folder with --out_dir",
        )
        cli.writable_dir(self.out_dir, "--out_dir")


def parse_args(argv=None) -> FiguresConfig:
    """The figures to draw, from the command line (flags are FiguresConfig's fields)."""
    return FiguresConfig.from_argv(argv, description=__doc__)


def load_curves(path: str, curves: str, what: str) -> dict:
    """A JSON with ``K_list`` and one list per estimator in ``curves``, each as long as K_list."""
    loaded = read_json(path, ("K_list", curves), what)
    ks, values = loaded["K_list"], loaded[curves]
    ok = (
        isinstance(ks, list)
        and isinstance(values, dict)
        and all(isinstance(v, list) and len(v) == len(ks) for v in values.values())
    )
    require(ok, f"{path}: {what} JSON is incomplete ({curves} does not give one value per K)")
    require(bool(ks) and all(_number(k) and k >= 1 for k in ks), f"{path}: K_list must hold group sizes >= 1")
    extra = [loaded[key] for key in ("ci95", "mse", "mse_ci95") if isinstance(loaded.get(key), dict)]
    for table in (values, *extra):
        for name, series in table.items():
            require(
                isinstance(series, list) and all(v is None or _number(v) for v in series),
                f"{path}: {name} holds a value that is not a number",
            )
            table[name] = [float("nan") if v is None else v for v in series]  # null (undefined) -> not drawn
    for name, series in (loaded.get("ci95") if isinstance(loaded.get("ci95"), dict) else {}).items():
        negative = next((v for v in series if v < 0), None)
        require(
            negative is None,
            f"{path}: ci95 of {name} holds the half-width {negative}, below 0 (a damaged or edited file)",
        )
    return loaded


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_result(path: str) -> dict:
    """A main JSON of run_tracecov.py (K_list and the mean trace per estimator)."""
    return load_curves(path, "conditional_on_x", "run_tracecov.py main")


def run_identity(result: dict) -> str:
    """What makes two main JSONs one run: the settings that change the numbers (model fingerprint and oracle table
    included, ``TracecovConfig.RESULT_FIELDS``; not where the files went) and the numbers themselves. With a
    recorded model fingerprint the model is its fingerprint, not its name: a run resumed through a bit-identical
    copy of its model (another path, the same files) is the same run."""
    from grpo_mse.config.gradient_evaluation import TracecovConfig

    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    names = [n for n in TracecovConfig.RESULT_FIELDS if not (n == "model" and config.get("model_fingerprint"))]
    settings = {name: config.get(name) for name in names}
    numbers = {key: result.get(key) for key in ("K_list", "conditional_on_x", "mse")}
    return json.dumps([settings, numbers], sort_keys=True, default=str)


def drop_repeated_runs(paths: list[str], results: list[dict]) -> list[int]:
    """The positions of the runs to draw: a run given again (two runs of the same settings, e.g. started in the same
    second as ``_HHMMSS`` and ``_HHMMSS_2``, or one file named twice) is drawn once, with a note naming both."""
    first_of: dict[str, int] = {}
    for index, result in enumerate(results):
        first = first_of.setdefault(run_identity(result), index)
        if first != index:
            print(
                f"note: --tracecov {paths[index]} is the same run as {paths[first]} (same settings, model "
                "fingerprint and numbers); drawn once",
                file=sys.stderr,
            )
    return sorted(first_of.values())


def load_theory(path: str) -> dict:
    """A theory JSON of scripts/exact_theory.py (K_list and mean exact trace_cov per estimator)."""
    return load_curves(path, "trace_cov", "theory")


def check_one_token(result: dict, theory: dict, label: str) -> None:
    """Warn when a run was not sampled as the exact theory assumes (one token, same temperature, top_p, score)."""
    config, want = result.get("config", {}), theory.get("config", {}).get("matching_run_flags", {})

    def differs(flag, value):
        got = config.get(flag, "model" if flag == "score_distribution" else None)
        if got is None:
            return False
        return float(got) != float(value) if isinstance(value, (int, float)) else str(got) != str(value)

    differ = [
        f"{flag}={config.get(flag, 'model')} (theory: {value})" for flag, value in want.items() if differs(flag, value)
    ]
    if differ:
        print(f"warning: {label}: the exact curves assume other settings: {', '.join(differ)}", file=sys.stderr)


def recorded_fingerprint(config: dict) -> str | None:
    """The model fingerprint a result recorded, else that of its recorded local model folder if it is here, else
    None (grpo_mse.policy.model_source.model_fingerprint: sha256 of the folder's files, or hub:<id>@<revision>)."""
    from grpo_mse.policy.model_source import model_fingerprint

    if config.get("model_fingerprint"):
        return str(config["model_fingerprint"])
    model = config.get("model")
    if isinstance(model, str) and os.path.isdir(os.path.expanduser(model)):
        return model_fingerprint(model, config.get("revision") or "main")
    return None


def check_same_model(result: dict, theory: dict, label: str, theory_path: str) -> None:
    """Refuse (one line) a theory computed for another model than the run's, or one whose model cannot be told."""
    run_config, theory_config = result.get("config", {}), theory.get("config", {})
    ours, theirs = recorded_fingerprint(run_config), recorded_fingerprint(theory_config)
    require(
        ours is not None and theirs is not None,
        f"--theory {theory_path}: cannot tell whether it was computed for the model of {label} (no model "
        f"fingerprint recorded, and the recorded model folder is not here: run {run_config.get('model')!r}, "
        f"theory {theory_config.get('model')!r})",
    )
    require(
        ours == theirs,
        f"--theory {theory_path} was computed for another model ({theory_config.get('model')}, {theirs[:20]}...) "
        f"than {label} ({run_config.get('model')}, {ours[:20]}...); use the theory of the run's own model",
    )


PAPER_COLUMNS = ("model", "K", "estimator", "mse")


def paper_results(path: str, models: list[str] | None = None) -> list[tuple[str, dict]]:
    """Published Figure-4 values as run-like dicts, one per model (only ``models`` when given; a name the file lacks
    is refused); every line is checked (a one-line UsageError names the line: a missing column, an unknown
    estimator, a K that is not a whole number >= 1, an mse or ci_halfwidth that is not a finite number >= 0, no data
    lines)."""
    from grpo_mse.figures.tracecov import PAPER_NAMES

    table: dict[str, dict] = {}
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:  # -sig: a BOM before the header is fine
            reader = csv.DictReader(handle)
            missing = [c for c in PAPER_COLUMNS if c not in (reader.fieldnames or [])]
            require(
                not missing,
                f"--paper {path}: no {', '.join(missing)} column (need {', '.join(PAPER_COLUMNS)}[, ci_halfwidth])",
            )
            for line, row in enumerate(reader, start=2):
                where = f"--paper {path} line {line}"
                require(
                    row["estimator"] in PAPER_NAMES,
                    f"{where}: unknown estimator {row['estimator']!r} (use {', '.join(PAPER_NAMES)})",
                )
                k, mse = _parse(row["K"], where, "K"), _parse(row["mse"], where, "mse")
                half = _parse(row.get("ci_halfwidth") or "nan", where, "ci_halfwidth", missing_ok=True)
                require(k.is_integer() and k >= 1, f"{where}: K must be a whole number >= 1 (got {row['K']})")
                run = table.setdefault(row["model"], {})
                run.setdefault(PAPER_NAMES[row["estimator"]], {})[int(k)] = (mse, half)
    except UnicodeDecodeError:
        raise UsageError(f"--paper {path}: not UTF-8 text; save it as UTF-8") from None
    require(bool(table), f"--paper {path}: no data lines under the header")
    unknown = [m for m in models or [] if m not in table]
    require(not unknown, f"--paper_models: {path} has no model {', '.join(unknown)} (it has {', '.join(table)})")
    runs = []
    for model, by_name in table.items():
        if models and model not in models:
            continue
        ks = sorted({k for values in by_name.values() for k in values})
        result = {
            "K_list": ks,
            "conditional_on_x": {n: [v.get(k, (float("nan"),))[0] for k in ks] for n, v in by_name.items()},
            "ci95": {n: [v.get(k, (0, float("nan")))[1] for k in ks] for n, v in by_name.items()},
        }
        runs.append((f"paper: {model}", result))
    return runs


def _parse(text, where: str, column: str, missing_ok: bool = False) -> float:
    """A finite number >= 0 from a CSV cell ("nan" allowed only when ``missing_ok``)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {column} {text!r} is not a number") from None
    require(
        (missing_ok and math.isnan(value)) or (math.isfinite(value) and value >= 0),
        f"{where}: {column} must be a finite number >= 0 (got {text})",
    )
    return value


RATIO_PAIR = {est.GRPO, est.ORACLE}  # the ratio panel's estimators; the advisor needs them too


def recorded_warnings(result: dict) -> list[str]:
    """What the run recorded as ``config.warnings`` (an oracle table made with other settings:
    ``tables.inputs.settings_mismatch``); empty for runs that recorded none."""
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    found = config.get("warnings")
    return [str(line) for line in found] if isinstance(found, list) else []


def has_ratio(result: dict) -> bool:
    return RATIO_PAIR <= set(result["conditional_on_x"])


def figure4(runs: list[tuple[str, dict]], out_stem: str, share_y: bool = False) -> list[str]:
    """One MSE panel per run and a final ratio panel; PNG and PDF. ``share_y``: the MSE panels share the first
    panel's y axis (one scale: a gap between runs is seen as it is) and its one label."""
    from grpo_mse.figures.comparisons import draw_ratio_panel
    from grpo_mse.figures.tracecov import draw_mse_panel, plt, save

    ratio = any(has_ratio(result) for _, result in runs)  # no GRPO/oracle pair: no (empty) ratio panel
    panels = len(runs) + ratio
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 4.0), squeeze=False)
    for ax, (label, result) in zip(axes[0], runs):
        title = label + ("\n(oracle table settings: see its warnings)" if recorded_warnings(result) else "")
        draw_mse_panel(ax, result, title=title, theory=result.get("theory"))
    if share_y and len(runs) > 1:
        shared = axes[0][: len(runs)]
        for ax in shared[1:]:
            ax.sharey(shared[0])
            ax.set_ylabel("")
        shared[0].set_ylabel("MSE (mean over prompts)")
        shared[0].autoscale(axis="y")
    if ratio:
        draw_ratio_panel(axes[0][-1], runs)
    fig.tight_layout()
    return save(fig, out_stem, formats=("png", "pdf"))


def check_advisor(result: dict, path: str) -> None:
    """UsageError naming why a run has no usable group-size advisor (and what to run instead)."""
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    if "group_size_advisor" not in result:
        estimators = config.get("estimators") or list(result["conditional_on_x"])
        require(
            not config.get("no_advisor"),
            f"{path}: no group_size_advisor (it ran with --no_advisor; rerun run_tracecov.py without it)",
        )
        require(
            RATIO_PAIR <= set(estimators),
            f"{path}: no group_size_advisor: the advisor needs the {est.GRPO} and {est.ORACLE} estimators and this "
            f"run has {' '.join(estimators)}; rerun run_tracecov.py with --estimators including {est.GRPO} "
            f"{est.ORACLE}",
        )
        raise UsageError(
            f"{path}: no group_size_advisor (fewer than 2 prompts? rerun run_tracecov.py with --T 2 or more)"
        )
    advice = result["group_size_advisor"]
    pooled = advice.get("pooled") if isinstance(advice, dict) else None
    require(
        isinstance(pooled, dict) and all(_number(pooled.get(c)) for c in ("c1", "c2", "c3")),
        f"{path}: the advisor's constants c1, c2, c3 are undefined (too few prompts or c1 batches of 2+ "
        "prompts); rerun run_tracecov.py with more prompts (--T) and --c1_batch 2 or more",
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    from grpo_mse.figures.comparisons import (  # matplotlib loads after the flags are checked
        plot_advisor,
        theory_overlay,
    )

    runs, results, warnings = [], [load_result(path) for path in args.tracecov], []
    for index in drop_repeated_runs(args.tracecov, results):
        path, result = args.tracecov[index], results[index]
        label = args.labels[index] if args.labels else os.path.basename(str(result["config"].get("model", path)))
        warnings += [f"warning: {path} recorded: {line}" for line in recorded_warnings(result)]
        if args.theory:
            theory = load_theory(args.theory)
            check_same_model(result, theory, label, args.theory)
            check_one_token(result, theory, label)
            result["theory"] = theory_overlay(theory, result["conditional_on_x"])
        runs.append((label, result))
    if args.paper:
        runs += paper_results(args.paper, args.paper_models)
    advisor = load_result(args.advisor) if args.advisor else None  # every input is read before any figure
    if advisor is not None:
        check_advisor(advisor, args.advisor)
    if args.training_csv:
        from grpo_mse.figures.training import TrainingFiguresConfig, main_training
        from grpo_mse.training.runs_table import read_training, select_runs

        training = read_training(args.training_csv, args.metric)
        select_runs(training, args.metric, args.steps, args.include_incomplete)  # refusals before any file is written
    for line in warnings:  # after every input is checked: a refused command prints its one line only
        print(line, file=sys.stderr)
    if runs:
        for path in figure4(runs, os.path.join(args.out_dir, args.name), share_y=args.share_y):
            print(f"wrote {path}")
    if advisor:
        for path in plot_advisor(advisor, os.path.join(args.out_dir, "group_size_advisor"), args.budget):
            print(f"wrote {path}")
    if args.training_csv:
        main_training(
            TrainingFiguresConfig(
                csv=args.training_csv,
                out_dir=args.out_dir,
                name="figure5_accuracy_vs_K",
                metric=args.metric,
                steps=args.steps,
                include_incomplete=args.include_incomplete,
            ),
            training,
        )
