"""Issue 25 cases 3 and 4: training runs -> collector -> Table 2 count every run once, at one common step.

A run's identity comes from what it recorded (never its name), two records of one run are one run, merged sweep
folders are refused when they hold two different runs under one K and seed, and Table 2 compares K at the last
step every included run reached (or --steps), leaving out (and listing) runs that did not complete. The property
test generates sweeps and checks every number of Table 2 against an independent computation.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
from conftest import bounded
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from grpo_mse.errors import DataError
from grpo_mse.figures.training import table2
from grpo_mse.training.logs import collect
from grpo_mse.training.runs_table import read_training

ROOT = Path(__file__).resolve().parents[2]
ACC = "val-core/arithmetic_zero_shot/acc/mean@1"
BUDGET, LR = 64, 0.001


def settings_line(k: int, seed: int, budget: int = BUDGET) -> str:
    return f"[grpo_train] settings: TRAINER=trl GROUP_SIZE={k} SEED={seed} BUDGET={budget} LR={LR}\n"


END = {"complete": 0, "failed": 1, "interrupted": 130}


def console_text(k, seed, values, status="complete", name_k=None, budget=BUDGET) -> str:
    """A launcher log of one run: its header and settings lines, one metric line per step, the end line."""
    name = f"sweep_K{name_k or k}_seed{seed}"
    head = f"[grpo_train] TRAINER=trl EXPERIMENT_NAME={name} GROUP_SIZE={k} SEED={seed} BUDGET={budget}\n"
    lines = [f"step:{step} - {ACC}:{value}\n" for step, value in enumerate(values)]
    end = "" if status == "interrupted" else f"[grpo_train] end: exit={END[status]} reason={status}\n"
    return head + settings_line(k, seed, budget) + "".join(lines) + end


def wandb_folder(folder: Path, k, seed, values, status="complete") -> None:
    """A wandb run folder (history, summary, config) as TRL's logger leaves it; ``unrecorded``: no exit code."""
    files = folder / "files"
    files.mkdir(parents=True)
    (files / "wandb-history.jsonl").write_text(
        "".join(json.dumps({"_step": s, ACC: v}) + "\n" for s, v in enumerate(values))
    )
    summary = {"_step": len(values) - 1, ACC: values[-1]}
    if status != "unrecorded":
        summary["run/exit_code"] = END[status]
    (files / "wandb-summary.json").write_text(json.dumps(summary))
    config = {
        "trainer": "trl",
        "budget": BUDGET,
        "lr": LR,
        "actor_rollout_ref": {"rollout": {"n": k}},
        "data": {"seed": seed},
    }
    (files / "config.yaml").write_text(
        "\n".join(f"{key}:\n  value: {json.dumps(value)}" for key, value in config.items()) + "\n"
    )


def rows_of(table: str) -> dict:
    """{K: (seeds, accuracy cell, best cell, marked)} of a Table 2."""
    found = {}
    for line in table.splitlines():
        match = re.match(r"^\| (\d+)(†?) \| (\d+) \| \**([^|*]+?)\** \| ([^|]+?) \|$", line)
        if match:
            found[int(match.group(1))] = (int(match.group(3)), match.group(4), match.group(5), bool(match.group(2)))
    return found


def cell(values: list) -> tuple[float, float | None]:
    """Independent reference: mean and 95% t half-width (scipy's t quantile), in percent."""
    xs = [100 * v for v in values]
    if len(xs) == 1:
        return xs[0], None
    return statistics.mean(xs), stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def assert_cell(text: str, expected: tuple[float, float | None]) -> None:
    mean, half = text.split(" ± ")
    assert abs(float(mean) - expected[0]) <= 0.005 + 1e-9, (text, expected)
    if expected[1] is None:
        assert half == "n/a"
    else:
        # the repository's t quantile is tabulated to 3 decimals (4.303 for 2 df): a relative 2e-4 on top of rounding
        assert abs(float(half) - expected[1]) <= 0.005 + 2e-4 * expected[1] + 1e-9, (text, expected)


def collect_quietly(paths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect([str(p) for p in paths])


# ---------------------------------------------------------------- the issue's cases


def test_case3_one_run_named_for_another_is_one_run(tmp_path):
    """GROUP_SIZE=4 SEED=1 EXPERIMENT_NAME=test_K8_seed5: its log and its wandb record are one run, K=4 seed 1."""
    values = [0.25, 0.375, 0.5]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "test_K8_seed5.log").write_text(
        console_text(4, 1, values, name_k=8).replace("_seed1", "_seed5")
    )
    wandb_folder(tmp_path / "wandb" / "offline-run-test_K8_seed5", 4, 1, values)
    with pytest.warns(UserWarning, match="K 8 in the name, 4 recorded"):
        frame = collect([str(tmp_path)])
    assert frame[["K", "seed", "status"]].drop_duplicates().values.tolist() == [[4, 1, "complete"]]
    assert frame["value"].tolist() == values


def _csv(tmp_path, rows, columns="K,seed,step,metric,value") -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(columns + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def _figures(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "plots" / "make_figures.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_case4_a_run_that_stopped_early_sets_or_leaves_the_common_step(tmp_path):
    """One of three K=2 seeds stops at step 2 of 10: Table 2 compares every K at step 2 (stated), or with --steps 10
    at step 10 without that run (listed); it used to average its step-2 value with the others' step-10 values."""
    rows = []
    for k, seeds in ((2, (0, 1, 2)), (4, (0, 1))):
        for seed in seeds:
            last = 2 if (k, seed) == (2, 2) else 10
            rows += [
                (k, seed, step, ACC, round(0.1 + 0.01 * step + 0.02 * seed + 0.01 * k, 4)) for step in range(last + 1)
            ]
    frame = read_training(str(_csv(tmp_path, rows)))
    value = {(k, s, step): v for k, s, step, _, v in rows}
    table = table2(frame)
    assert "at step 2 (the last step every included run reached)" in table
    found = rows_of(table)
    assert_cell(found[2][1], cell([value[(2, s, 2)] for s in (0, 1, 2)]))
    assert found[2][0] == 3 and found[4][0] == 2
    table = table2(frame, steps=[10])
    found = rows_of(table)
    assert "at step 10 (the largest of --steps)" in table and found[2][0] == 2
    assert_cell(found[2][1], cell([value[(2, s, 10)] for s in (0, 1)]))
    assert "Left out (1): K=2 seed=2: did not log step 10 (last step 2)" in table


def test_case4_interrupted_runs_are_left_out_unless_asked_for(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for seed in (0, 1):
        (logs / f"k2_{seed}.log").write_text(console_text(2, seed, [0.25, 0.5, 0.75]))
        (logs / f"k4_{seed}.log").write_text(console_text(4, seed, [0.25, 0.375, 0.5]))
    (logs / "k4_2.log").write_text(console_text(4, 2, [0.25, 0.875], status="interrupted"))  # Ctrl-C at step 1
    (logs / "k2_2.log").write_text(console_text(2, 2, [0.25, 1.0, 1.0], status="failed"))
    frame = collect([str(logs)])
    table = table2(frame)
    found = rows_of(table)
    assert found[2][0] == 2 and found[4][0] == 2 and "at step 2 " in table
    assert "Left out (2): K=2 seed=2: failed (last step 2); K=4 seed=2: interrupted (last step 1)." in table
    with_all = table2(frame, include_incomplete=True)
    found = rows_of(with_all)
    assert found[4][3] and found[2][3] and "at step 1 " in with_all  # footnoted; the common step drops to 1
    assert "†: includes runs that did not complete (--include_incomplete): K=2 seed=2: failed; K=4 seed=2" in with_all


CONFLICTING = [(2, 0, 1, ACC, 0.5), (2, 0, 1, ACC, 0.25), (4, 0, 1, ACC, 0.5)]
MIXED = [(2, 0, 1, ACC, 0.5, 64, LR, "trl", "complete"), (4, 0, 1, ACC, 0.5, 128, LR, "trl", "complete")]
RUN_COLUMNS = "K,seed,step,metric,value,budget,lr,trainer,status"


def test_case4_conflicting_duplicate_rows_and_mixed_settings_are_refused(tmp_path):
    """Conflicting duplicate rows of --training_csv kept the last one silently."""
    with pytest.raises(DataError, match="give " + ACC + " at step 1 different values"):
        read_training(str(_csv(tmp_path, CONFLICTING)))
    same = _csv(tmp_path, [(2, 0, 1, ACC, 0.5), (2, 0, 1, ACC, 0.5), (4, 0, 1, ACC, 0.25)])
    assert rows_of(table2(read_training(str(same))))[2][0] == 1  # an identical repeated row is one row
    with pytest.raises(DataError, match="compare K at one budget, lr and trainer"):
        table2(read_training(str(_csv(tmp_path, MIXED, RUN_COLUMNS))))


@pytest.mark.slow
def test_case4_refusals_are_one_line_with_nothing_written(tmp_path):
    for rows, columns, message in ((CONFLICTING, None, "different values"), (MIXED, RUN_COLUMNS, "one budget")):
        csv = _csv(tmp_path, rows, *([columns] if columns else []))
        result = _figures("--training_csv", csv, "--out_dir", tmp_path / "fig")
        assert result.returncode == 2 and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "fig").exists()


def test_case4_two_sweeps_merged_only_when_their_runs_agree(tmp_path):
    """collect_runs.py <sweep>/logs <earlier>/logs merged two different K=4 seed 1 runs (3 and 2 steps): refused;
    the same run in both folders is one run."""
    one, two = tmp_path / "sweep", tmp_path / "earlier"
    one.mkdir()
    two.mkdir()
    (one / "a.log").write_text(console_text(4, 1, [0.25, 0.375, 0.5]))
    (two / "b.log").write_text(console_text(4, 1, [0.125, 0.25]))
    script = ROOT / "Policy_Optimization" / "collect_runs.py"
    result = subprocess.run(
        [sys.executable, str(script), str(one), str(two), "--out", str(tmp_path / "r.csv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "both record K=4 seed=1 but differ" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "r.csv").exists()
    (two / "b.log").write_text(console_text(4, 1, [0.25, 0.375, 0.5]))  # the same run, copied
    assert collect([str(one), str(two)])["value"].tolist() == [0.25, 0.375, 0.5]
    (two / "b.log").write_text(console_text(4, 1, [0.25, 0.375, 0.5], budget=128))  # another budget, same K and seed
    with pytest.raises(DataError, match="budget 64 vs 128"):
        collect([str(one), str(two)])


def test_the_launcher_records_an_interrupted_run(tmp_path):
    """Ctrl-C on the launcher's process group: the log ends with an end line saying so, one line on stderr, 130."""
    stub = tmp_path / "python"
    stub.write_text(
        f'#!/bin/sh\nif [ "$2" = grpo_mse.training.budget ]; then exec {sys.executable} "$@"; fi\n'
        'case "$*" in *--check_only*) exit 0 ;; esac\n'  # the launcher's flag check: this stub takes its flags
        'echo "step:0 - val-core/x/acc/mean@1:0.5"\nexec sleep 60\n'
    )
    stub.chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_text("x")
    env = {
        **os.environ,
        "TRAINER": "trl",
        "MODEL": "org/name",
        "DATA_DIR": str(data),
        "GROUP_SIZE": "4",
        "BUDGET": "32",
        "SEED": "1",
        "BASE": str(tmp_path / "base"),
        "LOGGERS": "[console]",
        "PYTHON_BIN": str(stub),
        "PYTHONPATH": str(ROOT),
    }
    launcher = subprocess.Popen(
        ["bash", str(ROOT / "Policy_Optimization" / "grpo_train.sh")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a shell's background job (e.g. `bash .ci/run &`) ignores SIGINT, and bash cannot trap a signal ignored at
        # its start: give the launcher Ctrl-C's default disposition, as in a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    logs = tmp_path / "base" / "logs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        list(logs.glob("*.log")) and "step:0" in list(logs.glob("*.log"))[0].read_text()
    ):
        time.sleep(0.1)
    os.killpg(launcher.pid, signal.SIGINT)
    _, stderr = launcher.communicate(timeout=60)
    log = list(logs.glob("*.log"))[0].read_text()
    assert launcher.returncode == 130 and log.endswith("[grpo_train] end: exit=130 reason=interrupted steps=0\n")
    assert stderr.strip().splitlines() == [stderr.strip()] and "interrupted" in stderr
    assert set(collect([str(logs)])["status"]) == {"interrupted"}


# ---------------------------------------------------------------- the property: generated sweeps -> Table 2

KS, SEEDS = (2, 4, 8, 16), (0, 1, 2)


@st.composite
def sweeps(draw):
    """Runs with random K, seed, length and end (complete, failed, interrupted, a wandb record without its exit),
    each recorded as a console log, a wandb folder or both, in one of two sweep folders (some copied into both),
    and sometimes a second, different run under one K and seed (which must be refused)."""
    keys = draw(st.lists(st.tuples(st.sampled_from(KS), st.sampled_from(SEEDS)), min_size=1, max_size=7, unique=True))
    runs = []
    for k, seed in keys:
        values = draw(st.lists(st.integers(0, 64).map(lambda n: n / 64), min_size=1, max_size=6))
        kind = draw(st.sampled_from(["console", "wandb", "both"]))
        ends = ["complete", "complete", "failed", "interrupted"] + (["unrecorded"] if kind == "wandb" else [])
        runs.append(
            {
                "K": k,
                "seed": seed,
                "values": values,
                "kind": kind,
                "status": draw(st.sampled_from(ends)),
                "folders": draw(st.sampled_from([("a",), ("b",), ("a", "b")])),
            }
        )
    clash = draw(st.booleans()) and draw(st.integers(0, 9)) == 0
    return runs, clash


def write_sweep(root: Path, runs, clash: bool) -> None:
    for index, run in enumerate(runs):
        for folder in run["folders"]:
            base = root / folder
            name = f"run{index}_K{run['K'] * 2}_seed9"  # names say another K and seed: labels only
            if run["kind"] in ("console", "both"):
                status = "interrupted" if run["status"] == "unrecorded" else run["status"]
                (base / "logs").mkdir(parents=True, exist_ok=True)
                (base / "logs" / f"{name}.log").write_text(console_text(run["K"], run["seed"], run["values"], status))
            if run["kind"] in ("wandb", "both"):
                wandb_folder(
                    base / "wandb" / f"offline-run-{name}", run["K"], run["seed"], run["values"], run["status"]
                )
    if clash:
        run = runs[0]
        other = [min(v + 1 / 64, 1.0) if v < 1 else 0.5 for v in run["values"]]
        (root / "b" / "logs").mkdir(parents=True, exist_ok=True)
        (root / "b" / "logs" / "other.log").write_text(console_text(run["K"], run["seed"], other))


def check_table(runs, table: str) -> None:
    """Every number of Table 2 is the mean over the included runs of the metric at the stated common step."""
    included = [r for r in runs if r["status"] in ("complete", "unrecorded")]
    common = min(len(r["values"]) for r in included) - 1
    assert f"at step {common} (the last step every included run reached)" in table
    found = rows_of(table)
    assert set(found) == {r["K"] for r in included}
    for k, (seeds, at_step, best, marked) in found.items():
        mine = [r for r in included if r["K"] == k]
        assert seeds == len(mine) and not marked  # no run counted twice
        assert_cell(at_step, cell([r["values"][common] for r in mine]))
        assert_cell(best, cell([max(r["values"][: common + 1]) for r in mine]))
    for r in runs:  # every excluded run is listed with its reason
        if r not in included:
            assert f"K={r['K']} seed={r['seed']}: {r['status']} (last step {len(r['values']) - 1})" in table


def sweep_property(case) -> None:
    runs, clash = case
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_sweep(root, runs, clash)
        paths = [root / f for f in ("a", "b") if (root / f).exists()]
        try:
            frame = collect_quietly(paths)
        except DataError as error:
            assert clash and "but differ" in str(error) and "\n" not in str(error)
            return
        assert not clash
        csv = root / "runs.csv"
        frame.to_csv(csv, index=False)
        again = read_training(str(csv))  # the CSV path Table 2 reads
        if not any(r["status"] in ("complete", "unrecorded") for r in runs):
            with pytest.raises(DataError, match="no complete run"):
                table2(again)
            return
        check_table(runs, table2(again))


@bounded(20)
@given(case=sweeps())
def test_generated_sweeps_give_table2_at_the_common_step(case):
    sweep_property(case)


@pytest.mark.slow
@bounded(200)
@given(case=sweeps())
def test_generated_sweeps_give_table2_at_the_common_step_many(case):
    sweep_property(case)
