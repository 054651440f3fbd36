"""Trace of covariance (= MSE) of the vanilla, GRPO and oracle-baseline policy gradients against K.

For each K and prompt x: sample M groups of K continuations, form each estimator's gradient per
group over all parameters, take the trace of their sample covariance (denominator M-1), and
average over prompts with a 95% interval. Run with torchrun to shard prompts across processes.
"""

from __future__ import annotations

import os

from grpo_mse.config.gradient_evaluation import TracecovConfig


def parse_args(argv=None) -> TracecovConfig:
    """The run's config from the command line (flags are TracecovConfig's fields)."""
    return TracecovConfig.from_argv(argv, description=__doc__)


def main(argv=None) -> None:
    config = parse_args(argv)
    from grpo_mse.runs.tracecov import run_tracecov, summary_lines  # torch loads after the flags are checked

    outcome = run_tracecov(config)
    if outcome is None:  # not rank 0 under torchrun
        return
    if not config.skip_plot:  # the figure of the saved results, named after them
        from grpo_mse.figures.tracecov import plot_run  # matplotlib only when a plot is drawn

        png = os.path.join(config.plot_path, os.path.basename(outcome.base) + ".png")
        print(f"plot: {plot_run(outcome.result, png)}")
    print("\n".join(summary_lines(outcome.result)))
    print(f"results: {outcome.json_path}")
