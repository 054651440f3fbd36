"""Gradient evaluation: estimator registry, engines, trace statistics and the resumable job."""
