"""The group-size advisor's validation studies: heavy-tailed coverage of its intervals, its extrapolation check,
the power of the training validation, the advisor against training sweeps and the K map (scripts/advisor_check.py,
coverage_heavy_tails.py, power_analysis.py, k_validation.py, k_map.py; docs/advisor.md, docs/k_validation.md)."""
