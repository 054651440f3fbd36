"""Algorithm 1 simulated: its settings, its run (train with an estimator, evaluate the held-out reward) and the
summary of its records (scripts/simulate_algorithm1.py; docs/theory.md)."""
