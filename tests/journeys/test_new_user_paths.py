"""Fixes from the new-user sweep of issue 17 (docs/user_sweep.md), each through the path a user takes."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from grpo_mse.commands import make_figures as make_figures_command
from grpo_mse.errors import UsageError

ACC = "val-core/arithmetic_zero_shot/acc/mean@1"


def test_a_table_with_a_byte_order_mark_reads_like_one_without(tmp_path):
    from grpo_mse.tables.inputs import read_file

    row = {"id": 0, "prompt": "2 + 3 =", "ground_truth": 5, "V_oracle": 0.5}
    for name in ("t.jsonl", "t.json"):
        text = json.dumps(row) + "\n" if name.endswith("l") else json.dumps([row])
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert read_file(str(tmp_path / name)) == [row]


def test_a_running_wandb_run_does_not_repeat_its_last_validation(tmp_path):
    from grpo_mse.training.logs import collect

    files = tmp_path / "wandb" / "offline-run-1-abc" / "files"
    files.mkdir(parents=True)
    history = [
        {"_step": 0, ACC: 0.0},
        {"_step": 1, "critic/score/mean": 0.1},
        {"_step": 2, ACC: 0.125},
        {"_step": 3, "critic/score/mean": 0.2},
    ]
    (files / "wandb-history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    (files / "config.yaml").write_text("actor_rollout_ref:\n  value:\n    rollout:\n      n: 8\n")
    # validation ran at steps 0 and 2; the summary holds its last value at the current step 3
    (files / "wandb-summary.json").write_text(json.dumps({"_step": 3, ACC: 0.125, "critic/score/mean": 0.2}))
    acc = collect([str(tmp_path)]).query("metric == @ACC")
    assert acc[["step", "value"]].values.tolist() == [[0, 0.0], [2, 0.125]]
    # a summary value that the history never logged is still kept at the summary's step
    (files / "wandb-summary.json").write_text(json.dumps({"_step": 3, ACC: 0.25}))
    acc = collect([str(tmp_path)]).query("metric == @ACC")
    assert acc[["step", "value"]].values.tolist() == [[0, 0.0], [2, 0.125], [3, 0.25]]


def test_figure_name_is_a_stem_and_a_folder_is_not_a_json(tmp_path):

    figures = make_figures_command
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"K_list": [2], "conditional_on_x": {"grpo": [1.0]}}))
    for name in ("../x", "", "a/b", ".."):
        with pytest.raises(UsageError, match="must be a file stem without a folder"):
            figures.parse_args(["--tracecov", str(run), "--name", name, "--out_dir", str(tmp_path / "f")])
    assert not (tmp_path / "f").exists()
    with pytest.raises(UsageError, match="is a folder; give the run_tracecov.py main JSON file in it"):
        figures.load_result(str(tmp_path))


def test_budget_error_names_the_budget():
    from grpo_mse.training.budget import budget_settings

    with pytest.raises(ValueError, match=r"GROUP_SIZE=2 must divide 1 \(total_epochs = 1/K at BUDGET=8\)"):
        budget_settings(2, 8, k_name="GROUP_SIZE")


def _bash(script, *args, env=None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "DRY_RUN", "NETRC"))}
    return subprocess.run(
        ["bash", os.path.join(ROOT, script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment, **(env or {})},
    )


@pytest.mark.parametrize("script", ["Policy_Optimization/grpo_train.sh", "scripts/demo.sh", "scripts/train_demo.sh"])
def test_help_prints_the_whole_header_comment(script):
    done = _bash(script, "--help", env={"MODEL": "", "DATA_DIR": ""})
    header = []
    with open(os.path.join(ROOT, script)) as handle:
        for line in list(handle)[1:]:
            if not line.startswith("#"):
                break
            header.append(line[2:].rstrip("\n") if line.startswith("# ") else line[1:].rstrip("\n"))
    assert done.returncode == 0 and done.stdout.splitlines() == header and done.stderr == ""


@pytest.mark.slow
def test_online_wandb_without_a_key_is_refused_before_training(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"x")
    env = {
        "TRAINER": "trl",
        "MODEL": os.path.join(ROOT, "assets/train_policy"),
        "DATA_DIR": str(data),
        "GROUP_SIZE": "2",
        "BUDGET": "32",
        "BASE": str(tmp_path / "base"),
        "HOME": str(tmp_path),
        "PYTHON_BIN": sys.executable,
    }
    done = _bash("Policy_Optimization/grpo_train.sh", env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "WANDB_MODE=online but no wandb key" in done.stderr and not (tmp_path / "base").exists()
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    done = _bash("Policy_Optimization/grpo_train.sh", env=env)  # a key from `wandb login`: goes on (to the data)
    output = done.stdout + done.stderr
    assert "no wandb key" not in output and "train.parquet: not a readable parquet file" in output
