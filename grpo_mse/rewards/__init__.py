"""Verifiable 0/1 rewards, one rule per data source, shared by gradient evaluation and training (``rules``);
MATH answers compared by math-verify in killable worker processes (``worker_pool``)."""
