"""The collector reads TRL's progress-bar lines and refuses what it cannot read right: console logs, damaged
wandb files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from training_checks import ACC, ROOT, SCORE, one_line_error

from grpo_mse.errors import DataError
from grpo_mse.training.logs import collect

# TRL's console as trl_train writes it under transformers' progress bar (a real capture, shortened)
TRL_CONSOLE = (
    "[grpo_train] TRAINER=trl EXPERIMENT_NAME=demo_K4_seed0 GROUP_SIZE=4 SEED=0 BUDGET=32\n"
    "[trl] K=4 budget=32 prompts/step=8 steps=2 train=32 val=16 lr=0.001 seed=0\n"
    f"step:0 - {ACC}:0.1875\n"
    "\r  0%|          | 0/8 [00:00<?, ?it/s]\r 12%|#2        | 1/8 [00:00<00:02,  2.93it/s]"
    "\r 50%|#####     | 4/8 [00:00<00:00, 29.09it/s]"
    f"step:1 - actor/entropy:1.83 - actor/grad_norm:0.41 - actor/lr:0.001 - {SCORE}:0.125 - critic/rewards/mean:0.125\n"
    f"\r 88%|########8 | 7/8 [00:01<00:00,  9.61it/s]step:2 - {SCORE}:0.25 - critic/rewards/mean:0.25 - {ACC}:0.25\n"
    "\r100%|##########| 8/8 [00:01<00:00,  6.20it/s]\n"
    f"[trl] {ACC}: 0.1875 -> 0.2500 in 1 s\n"
)


# ---------------------------------------------------------------- the collector


def test_trl_console_steps_after_progress_bars_are_read(tmp_path):
    """Item 7: every step of a real TRL console, not only step 0."""
    log = tmp_path / "demo_K4_seed0.log"
    log.write_text(TRL_CONSOLE)
    frame = collect([str(log)])
    got = {(r.step, r.metric): r.value for r in frame.itertuples()}
    assert got == {
        (0, ACC): 0.1875,
        (1, SCORE): 0.125,
        (1, "critic/rewards/mean"): 0.125,
        (2, SCORE): 0.25,
        (2, "critic/rewards/mean"): 0.25,
        (2, ACC): 0.25,
    }


@pytest.mark.parametrize(
    "text,message",
    [
        (TRL_CONSOLE + TRL_CONSOLE, "holds 2 runs"),
        (TRL_CONSOLE.replace("[grpo_train]", "[other]") * 2, "holds 2 runs"),  # two TRL headers
        (f"GROUP_SIZE=4\nstep:3 - {ACC}:0.5\nstep:1 - {ACC}:0.25\n", "step 1 after step 3"),
        (f"GROUP_SIZE=4\nstep:1 - {ACC}:0.5step:2 - {ACC}:0.25\n", "run together"),
        (f"GROUP_SIZE=4\nstep:1 - {ACC}:0.5 - {SCORE}:0.1 - {ACC}:0.25\n", "logged twice"),
        (f"GROUP_SIZE=4\nstep:1 - {ACC}:nan\n", "is nan at step 1"),
        (f"GROUP_SIZE=4\nstep:1 - {ACC}:np.float64(inf)\n", "is inf"),
        (f"GROUP_SIZE=4\nstep:1 - {ACC}:0.2x\n", "is not a number"),
        (f"GROUP_SIZE=4\nstep:1 - {ACC} 0.2\n", "garbled"),
    ],
)
def test_collector_refuses_what_it_cannot_read_right(tmp_path, text, message):
    log = tmp_path / "run_K4_seed0.log"
    log.write_text(text)
    with pytest.raises(DataError, match=message):
        collect([str(log)])


def test_unterminated_last_line_is_skipped_with_a_warning(tmp_path):
    log = tmp_path / "run_K4_seed0.log"
    settings = "[grpo_train] settings: TRAINER=trl GROUP_SIZE=4 SEED=0 BUDGET=32 LR=0.001"
    log.write_text(f"{settings}\nstep:0 - {ACC}:0.25\nstep:1 - {ACC}:0.3")  # killed while writing "0.375"
    with pytest.warns(UserWarning, match="unterminated last line 3"):
        frame = collect([str(log)])
    assert frame["value"].tolist() == [0.25] and set(frame["status"]) == {"interrupted"}  # no end line


def _wandb_run(tmp_path, summary=None, config=None, history=None) -> Path:
    run = tmp_path / "wandb" / "offline-run-1-abc"
    (run / "files").mkdir(parents=True)
    rows = history if history is not None else [{"_step": 0, ACC: 0.25}, {"_step": 5, ACC: 0.5}]
    (run / "files" / "wandb-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "files" / "wandb-summary.json").write_text(summary if summary is not None else json.dumps({"_step": 5}))
    (run / "files" / "config.yaml").write_text(
        config if config is not None else "actor_rollout_ref:\n  value:\n    rollout:\n      n: 8\n"
    )
    return run


@pytest.mark.parametrize(
    "kind,text,message",
    [
        ("summary", '{"_step": 5, "val', "wandb-summary.json: not readable JSON"),
        ("summary", "[1, 2]", "a JSON list, not an object"),
        ("summary", '{"_step": "abc"}', "_step 'abc' is not a whole number"),
        ("summary", json.dumps({"_step": 6, ACC: float("nan")}), "is nan at step 6"),
        ("config", "actor_rollout_ref: [unclosed", "config.yaml: not readable YAML"),
        ("config", "- 1\n- 2\n", "a YAML list, not a mapping"),
        ("history", None, "_step 2.5 is not a whole number"),
    ],
)
def test_damaged_wandb_files_are_one_line_errors(tmp_path, kind, text, message):
    if kind == "history":
        run = _wandb_run(tmp_path, history=[{"_step": 2.5, ACC: 0.25}])
    else:
        run = _wandb_run(tmp_path, **{kind: text})
    with pytest.raises(DataError, match=message):
        collect([str(run.parent)])
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "Policy_Optimization" / "collect_runs.py"),
            str(run.parent),
            "--out",
            str(tmp_path / "out.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(result)
    assert not (tmp_path / "out.csv").exists()
