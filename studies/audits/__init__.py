"""Audits of results: the reward rule against a blind reading, the baseline diagnostic against the measured ratios,
two oracle tables and two tracecov runs compared (scripts/reward_audit.py, compare_baseline.py,
compare_oracle_tables.py, compare_tracecov_runs.py)."""
