"""Analysis: the group-size advisor (its error model, the measured curve of std-normalised GRPO, per-prompt
constants, joint prompt bootstrap, coverage calibration and report) and paired comparisons of the estimators.
The exact theory on enumerable cases and the Algorithm-1 simulation are studies (studies.exact,
studies.simulation)."""
