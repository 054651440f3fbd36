"""Monte Carlo oracle value V(x) = P(reward = 1 | x) per prompt, from n_oracle sampled continuations.

Writes one JSON line per prompt: the input row plus V_oracle, n_oracle, correct_count and a 95%
Wilson interval. Lines are appended as prompts finish; --resume continues the latest matching file.
The reward rule is the row's data_source's (the last integer when a row has none).
"""

from __future__ import annotations

from grpo_mse.config.gradient_evaluation import OracleConfig


def parse_args(argv=None) -> OracleConfig:
    """The run's config from the command line (flags are OracleConfig's fields)."""
    return OracleConfig.from_argv(argv, description=__doc__)


def main(argv=None) -> None:
    config = parse_args(argv)
    from grpo_mse.runs.oracle import run_oracle  # torch loads after the flags are checked

    outcome = run_oracle(config)
    if outcome is None:  # not rank 0 under torchrun
        return
    minutes = outcome.seconds / 60
    print(f"examples: {outcome.new} new, {outcome.total} in the output file")
    if outcome.total > outcome.selected:
        print(
            f"note: the file holds {outcome.total} rows, more than the {outcome.selected} that --limit "
            "selects (an earlier run's); none was removed"
        )
    if outcome.lengths is not None and outcome.lengths.line():
        print(outcome.lengths.line())
    print(f"elapsed: {minutes:.2f} min ({60 * minutes / max(outcome.new, 1):.2f} s per example)")
    print(f"output: {outcome.path}")
