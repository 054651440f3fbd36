"""Collector (console logs, wandb runs) -> CSV, and the Figure-5 plot / Table-2 on synthetic logs."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from grpo_mse.figures.training import plot_figure5, table2
from grpo_mse.tables.outputs import mean_t_interval
from grpo_mse.training.logs import COLUMNS, collect, parse_console, parse_value, read_console_run
from grpo_mse.training.run_identity import RunIdentity, from_config, from_console
from grpo_mse.training.runs_table import default_steps, pick_metric

ROOT = Path(__file__).resolve().parents[2]
METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"


def accuracy(k: int, seed: int, step: int) -> float:
    """Synthetic accuracy curve peaking at K = 32."""
    return round(0.3 + 0.002 * step - 0.01 * abs(k.bit_length() - 6) + 0.01 * seed, 6)


def console_log(k: int, seed: int, steps=(0, 5, 10, 15, 20)) -> str:
    lines = [f"[grpo_train] TRAINER=verl EXPERIMENT_NAME=run GROUP_SIZE={k} SEED={seed} BUDGET=1024", "VERL banner"]
    for step in range(1, max(steps) + 1):
        parts = [f"step:{step}", "actor/pg_loss:np.float64(-0.01)", "critic/score/mean:0.5", "timing_s/gen:3.2"]
        if step in steps:
            parts.append(f"{METRIC}:np.float64({accuracy(k, seed, step)})")
        lines.append(f"(TaskRunner pid=123) {' - '.join(parts)}")
    lines.insert(2, f"(TaskRunner pid=123) step:0 - {METRIC}:{accuracy(k, seed, 0)}")
    lines.append(f"[grpo_train] end: exit=0 reason=completed steps={max(steps)}")
    return "\n".join(lines) + "\n"


def test_console_parsing_helpers():
    assert parse_value("np.float64(0.25)") == 0.25 and parse_value("tensor(3.)") == 3.0
    assert math.isnan(parse_value("nan")) and parse_value("abc") is None  # non-finite: refused by the collector
    records = parse_console("noise\n(Runner pid=1) step:7 - a/b:1 - c@1/d:np.float32(0.5) - e:text\nstep:x - a:1")
    assert records == [(7, "a/b", 1.0), (7, "c@1/d", 0.5)]
    settings = "[grpo_train] settings: TRAINER=trl GROUP_SIZE=8 SEED=1 BUDGET=32 LR=0.001"
    assert from_console([settings]) == (RunIdentity(8, 1, 32, 0.001, "trl"), None)
    verl = {"actor_rollout_ref": {"rollout": {"n": 16}}, "data": {"seed": 2, "train_batch_size": 4}}
    assert from_config(verl) == (RunIdentity(16, 2, 64, None, "verl"), None)
    assert from_console(["gsm8k_Qwen2.5-1.5B_K32_seed4"]) == (None, None)  # a name is a label only


def test_a_log_named_for_another_run_is_the_run_it_recorded(tmp_path):
    log = tmp_path / "grpo_K32_seed4.log"
    log.write_text(console_log(8, 1).replace("EXPERIMENT_NAME=run", "EXPERIMENT_NAME=x_K32_seed4"))
    assert read_console_run(str(log)).identity == RunIdentity(8, 1, 1024, None, "verl")
    (tmp_path / "named_K16_seed2.log").write_text(f"step:0 - {METRIC}:0.5\n")  # no recorded settings: skipped
    with pytest.warns(UserWarning) as caught:
        frame = collect([str(tmp_path)])
    messages = " | ".join(str(w.message) for w in caught)
    assert "the recorded settings win" in messages and "named_K16_seed2.log: it records no group size K" in messages
    assert frame[["K", "seed"]].drop_duplicates().values.tolist() == [[8, 1]]


@pytest.fixture()
def run_logs(tmp_path):
    """Console logs for K in {4, 16, 32, 128} x seeds {0, 1, 2}, plus a wandb-history run for K=64."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for k in (4, 16, 32, 128):
        for seed in (0, 1, 2):
            (logs / f"grpo_Qwen2.5-1.5B-Instruct_K{k}_seed{seed}.log").write_text(console_log(k, seed))
    (logs / "unrelated.txt").write_text("nothing here\n")
    run = tmp_path / "wandb" / "run-20260101_000000-abc" / "files"
    run.mkdir(parents=True)
    history = [{"_step": s, METRIC: accuracy(64, 0, s), "actor/pg_loss": 0.1} for s in (0, 5, 10, 15, 20)]
    (run / "wandb-history.jsonl").write_text("\n".join(json.dumps(h) for h in history) + "\n")
    (run / "wandb-summary.json").write_text(json.dumps({"_step": 25, METRIC: 0.5, "_runtime": 9.0}))
    (run / "config.yaml").write_text(
        "actor_rollout_ref:\n  value:\n    rollout:\n      n: 64\n"
        "data:\n  value:\n    seed: 0\n    train_batch_size: 16\n"
    )
    (run.parent / "logs").mkdir()
    (run.parent / "logs" / "debug.log").write_text("step:5 - junk:1\n")
    return tmp_path


def test_collect_console_and_wandb_history(run_logs):
    frame = collect([str(run_logs)])
    assert list(frame.columns) == [*COLUMNS, "budget", "lr", "trainer", "status"]
    assert sorted(frame["K"].unique()) == [4, 16, 32, 64, 128]
    assert set(frame["status"]) == {"complete", "unrecorded"}  # the wandb-history folder records no exit
    assert set(frame["metric"]) == {METRIC, "critic/score/mean"}
    acc = frame[frame["metric"] == METRIC]
    assert len(acc) == 4 * 3 * 5 + 6
    row = acc[(acc["K"] == 32) & (acc["seed"] == 2) & (acc["step"] == 10)]
    assert row["value"].item() == pytest.approx(accuracy(32, 2, 10))
    k64 = acc[acc["K"] == 64]
    assert k64["step"].tolist() == [0, 5, 10, 15, 20, 25]  # the summary adds the last step
    assert k64["value"].tolist() == [accuracy(64, 0, s) for s in (0, 5, 10, 15, 20)] + [0.5]


def test_collect_runs_script_and_figures(run_logs, tmp_path):
    out = tmp_path / "runs.csv"
    script = ROOT / "Policy_Optimization" / "collect_runs.py"
    spec = importlib.util.spec_from_file_location("collect_runs", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(run_logs / "logs"), "--out", str(out)])
    frame = pd.read_csv(out)
    assert list(frame.columns[:5]) == COLUMNS and sorted(frame["K"].unique()) == [4, 16, 32, 128]

    assert pick_metric(frame) == METRIC
    assert default_steps(frame[frame["metric"] == METRIC]) == [0, 5, 15, 20]
    paths = plot_figure5(frame, str(tmp_path / "fig" / "figure5"), steps=[5, 20])
    assert [os.path.basename(p) for p in paths] == ["figure5.png", "figure5.pdf"]
    assert all(os.path.getsize(p) > 1000 for p in paths)

    table = table2(frame)
    lines = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [line.split("|")[1].strip() for line in lines] == ["4", "16", "32", "128"]
    mean, half = mean_t_interval([accuracy(32, s, 20) * 100 for s in (0, 1, 2)])
    assert f"**{mean:.2f} ± {half:.2f}**" in table  # K = 32 is best, in bold


def test_figures_module_cli(run_logs, tmp_path):
    csv = tmp_path / "runs.csv"
    collect([str(run_logs)]).to_csv(csv, index=False)
    result = subprocess.run(
        [sys.executable, "-m", "grpo_mse.figures.training", "--csv", str(csv), "--out_dir", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "figure5_accuracy_vs_K.pdf").exists()
    assert "| 64 | 1 |" in (tmp_path / "out" / "figure5_accuracy_vs_K_table.md").read_text()


def test_real_wandb_offline_run(tmp_path):
    """An offline run written by wandb itself (its .wandb file spans several 32 KiB blocks)."""
    pytest.importorskip("wandb")
    code = (
        "import wandb\n"
        "r = wandb.init(project='p', name='grpo_K16_seed9',\n"
        "               config={'actor_rollout_ref': {'rollout': {'n': 16}}, 'data': {'seed': 3}})\n"
        "for s in range(1, 301):\n"
        f"    d = {{f'actor/m{{j}}': s + j for j in range(10)}}\n"
        f"    d.update({{'{METRIC}': s / 1000}} if s % 5 == 0 else {{}})\n"
        "    r.log(d, step=s)\n"
        "r.finish()\n"
    )
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.skip(f"wandb could not write an offline run here: {result.stderr[-300:]}")
    files = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert files and files[0].stat().st_size > 64 * 1024
    with pytest.warns(UserWarning, match="seed 9 in the name, 3 recorded"):
        frame = collect([str(tmp_path / "wandb")])  # the latest-run link must not double count
    assert set(frame["K"]) == {16} and set(frame["seed"]) == {3}  # the config's seed, not the name's
    assert set(frame["status"]) == {"complete"}  # wandb's exit record: exit code 0
    assert frame["step"].tolist() == list(range(5, 301, 5))
    assert frame["value"].tolist() == pytest.approx([s / 1000 for s in range(5, 301, 5)])
    # issue 25 case 4: a truncated run file was read silently (4 of 10 rows); now it says so
    cut = tmp_path / "cut" / files[0].parent.name
    cut.mkdir(parents=True)
    data = files[0].read_bytes()
    (cut / files[0].name).write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning):
        short = collect([str(cut)])
    # cut inside a record: truncated; cut between two records: no exit record, so interrupted (both left out)
    assert set(short["status"]) <= {"truncated", "interrupted"} and 0 < len(short) < len(frame)
