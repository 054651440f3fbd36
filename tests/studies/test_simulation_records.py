"""Algorithm 1's saved record (studies.simulation.records): JSON and CSV round trips, and the rows of a saved
algorithm1.csv read with their types."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_mse.errors import DataError
from grpo_mse.tables.outputs import to_json
from studies.simulation.records import SIMULATION_COLUMNS, SimulationRecord

# Rows of results/simulation/algorithm1.csv.
SAVED_SIMULATION_CSV = "K,seed,estimator,step,heldout_reward\n2,0,naive,0,0.1708984375\n2,0,naive,30,0.1669921875\n"
names = st.sampled_from(["naive", "grpo", "oracleV", "grpo_std", "drgrpo"])

simulation_records = st.builds(
    SimulationRecord,
    K=st.integers(1, 4096),
    seed=st.integers(0, 10**6),
    estimator=names,
    step=st.integers(0, 10**5),
    heldout_reward=st.floats(0.0, 1.0),
)


@given(st.lists(simulation_records, max_size=5))
def test_simulation_records_survive_json_and_the_csv(records):
    """to_json -> JSON -> from_json, and algorithm1.csv's rows -> from_csv, give the records back."""
    for record in records:
        assert SimulationRecord.from_json(json.loads(to_json(record.to_json()))) == record
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SIMULATION_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(r.to_json() for r in records)
    assert [SimulationRecord.from_csv(row) for row in csv.DictReader(io.StringIO(buffer.getvalue()))] == records


def test_saved_simulation_rows_are_read_with_their_types():
    """Rows of a saved algorithm1.csv; its header is SIMULATION_COLUMNS; a row lacking a column is refused."""
    rows = list(csv.DictReader(io.StringIO(SAVED_SIMULATION_CSV)))
    assert list(rows[0]) == SIMULATION_COLUMNS == ["K", "seed", "estimator", "step", "heldout_reward"]
    assert [SimulationRecord.from_csv(row) for row in rows] == [
        SimulationRecord(2, 0, "naive", 0, 0.1708984375),
        SimulationRecord(2, 0, "naive", 30, 0.1669921875),
    ]
    assert list(SimulationRecord(2, 0, "naive", 0, 0.5).to_json()) == SIMULATION_COLUMNS
    with pytest.raises(DataError, match="^algorithm1.csv: row 1: SimulationRecord lacks step$"):
        SimulationRecord.from_csv({k: v for k, v in rows[0].items() if k != "step"}, "algorithm1.csv: row 1")
