"""The record Algorithm 1's simulation saves (algorithm1.csv, one row per run and evaluation step), to and from JSON
and CSV."""

from __future__ import annotations

from dataclasses import dataclass, fields

from grpo_mse.tables.records import SavedRecord


@dataclass
class SimulationRecord(SavedRecord):
    """The held-out reward (expected reward or greedy accuracy) of run (K, seed, estimator) after ``step`` steps."""

    K: int
    seed: int
    estimator: str
    step: int
    heldout_reward: float

    @classmethod
    def from_csv(cls, row: dict, where: str | None = None) -> SimulationRecord:
        """The record of a CSV row (every value a string); ``to_json`` gives algorithm1.csv's row."""
        record = cls.from_json(row, where)
        return cls(int(record.K), int(record.seed), record.estimator, int(record.step), float(record.heldout_reward))


SIMULATION_COLUMNS = [f.name for f in fields(SimulationRecord)]  # the columns of algorithm1.csv
