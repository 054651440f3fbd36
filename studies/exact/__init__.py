"""Exact theory: moments and MSEs by enumeration (one generated token), and the exact-vs-Monte-Carlo table
(scripts/exact_theory.py, scripts/estimator_table.py; docs/theory.md)."""
