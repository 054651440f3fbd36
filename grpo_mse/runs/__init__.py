"""Runs above the maths, each one object read top to bottom: the oracle run, the tracecov run, Algorithm 1."""
