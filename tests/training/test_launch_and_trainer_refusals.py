"""The training paths a user takes after the demo (issue 17): a real sweep starts, logs and checkpoints are
one per run, the launcher never appends to a log, TRL and VERL refuse settings that cannot train."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import pytest
from conftest import bounded
from gold_strategies import WHOLE, golds
from hypothesis import given
from training_checks import ROOT, one_line_error

from grpo_mse.training.sweep import plan, run_env

SWEEP = ROOT / "Policy_Optimization" / "sweep_group_size.py"
LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"


# ---------------------------------------------------------------- sweep and launcher: one run, one log, one folder


def test_real_sweep_starts_without_dry_run(tmp_path):
    """Item 1: DRY_RUN unset used to raise KeyError before the first run."""
    stub = tmp_path / "stub.sh"
    stub.write_text('echo "$EXPERIMENT_NAME DRY_RUN=$DRY_RUN LOG_FILE=${LOG_FILE:-} CKPT_DIR=${CKPT_DIR:-}"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "LOG_FILE", "CKPT_DIR")}
    env.update(LOG_FILE=str(tmp_path / "sweep.log"), CKPT_DIR=str(tmp_path / "ckpt"))
    result = subprocess.run(
        [
            sys.executable,
            str(SWEEP),
            "--K_list",
            "4",
            "8",
            "--seeds",
            "0",
            "1",
            "--budget",
            "64",
            "--launcher",
            str(stub),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "LOG_FILE=" in line]
    assert len(lines) == 4
    logs = {line.split("LOG_FILE=")[1].split()[0] for line in lines}
    ckpts = {line.split("CKPT_DIR=")[1].split()[0] for line in lines}
    assert len(logs) == 4 and len(ckpts) == 4  # exported LOG_FILE / CKPT_DIR: still one per run
    assert str(tmp_path / "sweep_grpo_K8_seed1.log") in logs and str(tmp_path / "ckpt" / "grpo_K4_seed0") in ckpts


def test_run_env_gives_each_run_its_own_log_and_folder():
    runs = plan([4, 8], [0], budget=64)
    envs = [run_env(r, 64, "0", {"LOG_FILE": "/x/all", "CKPT_DIR": "/c"}) for r in runs]
    assert [e["LOG_FILE"] for e in envs] == ["/x/all_grpo_K4_seed0.log", "/x/all_grpo_K8_seed0.log"]
    assert [e["CKPT_DIR"] for e in envs] == ["/c/grpo_K4_seed0", "/c/grpo_K8_seed0"]
    assert "LOG_FILE" not in run_env(runs[0], 64, "0", {})  # unset stays unset: the launcher names it


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from grpo_mse.training.data import arithmetic_splits, write_splits

    folder = tmp_path_factory.mktemp("a,b")  # a comma in the data path (Hydra syntax unless quoted)
    write_splits(arithmetic_splits(8, 4), str(folder))
    return folder


def launcher_env(tmp_path, **settings_) -> dict:
    drop = {"LOG_FILE", "CKPT_DIR", "EXPERIMENT_NAME", "DRY_RUN", "SEED", "LR", "BASE", "BASE_DIR", "TRAINER"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(
        BASE=str(tmp_path / "base"),
        PYTHON_BIN=sys.executable,
        WANDB_MODE="disabled",
        MODEL=str(ROOT / "assets" / "tiny_policy"),
    )
    env.update({k: str(v) for k, v in settings_.items()})
    return env


def test_launcher_names_logs_and_checkpoints_per_run_and_quotes_paths(tmp_path, data_dir):
    env = launcher_env(tmp_path, DATA_DIR=data_dir, GROUP_SIZE=8, BUDGET=64, SEED=1, LR="3e-5", DRY_RUN="print")
    result = subprocess.run(["bash", str(LAUNCHER)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    run = "grpo_tiny_policy_K8_seed1_B64_lr3e-5"
    assert f"trainer.default_local_dir=\\'{tmp_path}/base/checkpoints/demystifying_grpo/{run}\\'" in result.stdout
    assert f"data.train_files=\\'{data_dir}/train.parquet\\'".replace(",", "\\,") in result.stdout


def test_launcher_never_appends_to_a_log(tmp_path, data_dir):
    """Item 6: an existing LOG_FILE is refused before any work; with a fake python nothing trains."""
    log = tmp_path / "run.log"
    log.write_text("[grpo_train] TRAINER=trl ...\nstep:0 - x:1\n")
    env = launcher_env(tmp_path, DATA_DIR=data_dir, GROUP_SIZE=8, BUDGET=64, TRAINER="trl", LOG_FILE=log)
    result = subprocess.run(["bash", str(LAUNCHER)], env=env, capture_output=True, text=True, timeout=60)
    one_line_error(result)
    assert "a log holds one run" in result.stderr and log.read_text().count("[grpo_train]") == 1
    ckpt = tmp_path / "ckpt"
    (ckpt).mkdir()
    (ckpt / "model.safetensors").write_text("earlier run")
    env.update(LOG_FILE=str(tmp_path / "new.log"), CKPT_DIR=str(ckpt))
    result = subprocess.run(["bash", str(LAUNCHER)], env=env, capture_output=True, text=True, timeout=60)
    one_line_error(result)
    assert "already holds a model" in result.stderr and not (tmp_path / "new.log").exists()


@pytest.mark.parametrize("lr", ["1e6", "1", "nan", "inf", "-1e-6", "0"])
def test_absurd_learning_rates_are_refused(tmp_path, data_dir, lr):
    env = launcher_env(tmp_path, DATA_DIR=data_dir, GROUP_SIZE=8, BUDGET=64, TRAINER="trl", LR=lr)
    result = subprocess.run(["bash", str(LAUNCHER)], env=env, capture_output=True, text=True, timeout=60)
    one_line_error(result)
    assert f"LR={lr} must be a positive number below 1" in result.stderr


@pytest.mark.slow
def test_trl_refuses_fewer_rows_than_prompts_per_step_and_lr_1e6(tmp_path, data_dir):
    """Item 8: 8 training rows, 16 prompts per step: refused in the dry run already (no model loaded)."""
    base = [
        sys.executable,
        "-m",
        "grpo_mse.training.trl_train",
        "--model",
        str(ROOT / "assets" / "tiny_policy"),
        "--train_file",
        str(data_dir / "train.parquet"),
        "--val_file",
        str(data_dir / "test.parquet"),
        "--reward_path",
        str(ROOT / "Policy_Optimization" / "reward.py"),
        "--output_dir",
        str(tmp_path / "o"),
    ]
    result = subprocess.run(
        [*base, "--group_size", "4", "--budget", "64", "--dry_run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(result)
    assert "8 training rows but 16 prompts per step" in result.stderr
    result = subprocess.run(
        [*base, "--group_size", "4", "--budget", "32", "--lr", "1e6", "--dry_run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(result)
    assert "below 1" in result.stderr and not (tmp_path / "o").exists()


def test_trl_steps_per_epoch_drop_the_incomplete_batch():
    """Issue 18: TRL's RepeatSampler and VERL's dataloader (drop_last) make floor(n / prompts) steps."""
    import argparse

    from grpo_mse.training.trl_backend import UPDATES_PER_STEP, grpo_config, steps_per_epoch

    assert steps_per_epoch(33, 8) == 4 and steps_per_epoch(32, 8) == 4 and steps_per_epoch(39, 8) == 4
    args = argparse.Namespace(
        group_size=4,
        budget=32,
        seed=0,
        lr=1e-4,
        max_steps=0,
        output_dir="unused",
        experiment_name="x",
        norm_adv_by_std=1,
        max_response_length=8,
        temperature=0.7,
    )
    # 39 rows, 8 prompts per step, 32/(8*4) = 1 epoch: 4 steps (ceil gave 5), 4 updates each
    assert grpo_config(args, 39).max_steps == 4 * UPDATES_PER_STEP
    assert grpo_config(args, 39).temperature == 0.7  # the training rollouts' temperature reaches TRL
    from trl.trainer.grpo_trainer import RepeatSampler

    sampler = RepeatSampler(list(range(39)), mini_repeat_count=4, batch_size=8, repeat_count=4, shuffle=False)
    assert len(list(sampler)) == 4 * 8 * 4 * 4  # 4 whole batches of 8 prompts, each K=4 times, 4 updates


@pytest.mark.slow
def test_verl_dry_run_refuses_a_mistyped_override():
    from grpo_mse.training.verl_launch import check_override_types, main

    assert "must be an integer" in check_override_types(["trainer.total_epochs=abc"])
    assert (
        check_override_types(
            [
                "trainer.total_epochs=3",
                "actor_rollout_ref.actor.optim.lr=2e-6",
                "data.train_files='/a,b/x.parquet'",
                "algorithm.use_kl_in_reward=False",
            ]
        )
        is None
    )
    assert "finite number" in check_override_types(["actor_rollout_ref.actor.optim.lr=inf"])
    assert main(["trainer.total_epochs=abc"]) == 2


@pytest.mark.slow
def test_verl_dry_run_names_an_unknown_key_and_the_users_own_value():
    """Issue 17 sweep: a typo in a key gave Hydra's multi-line message; a bad value quoted the launcher's."""
    from grpo_mse.training.verl_launch import check_override_keys, check_override_types

    typo = check_override_keys(["trainer.total_epochs=2", "trainer.totl_epochs=2"])
    assert typo == (
        "override trainer.totl_epochs=2: VERL's configuration has no key trainer.totl_epochs "
        "(did you mean trainer.total_epochs?); a new key needs +trainer.totl_epochs=..."
    )
    assert "(did you mean trainer.total_epochs?)" in check_override_keys(["trainr.total_epochs=2"])  # a parent typo
    assert "did you mean" not in check_override_keys(["trainer.zzzzzz=1"])
    assert check_override_keys(["~trainer.qqqqqq"]).endswith("has no key trainer.qqqqqq")
    known = ["trainer.total_epochs=2", "+trainer.brand_new=1", "++trainer.other=1", "data.seed=1", "hydra.run.dir=x"]
    assert check_override_keys(known + ["trainer.logger=[console]", "actor_rollout_ref.rollout.seed=3"]) is None
    # the launcher passes trainer.total_epochs=2 first; the user's later value wins in Hydra and is the one quoted
    bad = check_override_types(["trainer.total_epochs=2", "trainer.total_epochs=abc"])
    assert bad.startswith("override trainer.total_epochs=abc:") and bad.endswith("got 'abc'")
    assert check_override_types(["trainer.total_epochs=abc", "trainer.total_epochs=3"]) is None


@pytest.mark.slow
def test_verl_dry_run_reads_the_data_files(tmp_path, data_dir, capsys):
    """Issue 17 sweep: the VERL dry run read no data (README.md as TRAIN_FILE passed); now it reads the parquet."""
    from grpo_mse.training.data import write_splits
    from grpo_mse.training.verl_launch import check_data_files, main

    val = f"data.val_files='{data_dir}/test.parquet'"  # quoted: a comma in the folder name
    assert check_data_files([f"data.train_files='{data_dir}/train.parquet'", val]) is None
    assert check_data_files([f"data.train_files=['{data_dir}/train.parquet']", val]) is None  # a list of files
    readme = str(ROOT / "README.md")
    assert check_data_files([f"data.train_files={readme}", val]) == (
        f"data.train_files={readme}: VERL reads parquet files (Policy_Optimization/prepare_data.py writes them)"
    )
    torn = tmp_path / "torn.parquet"
    torn.write_bytes((data_dir / "train.parquet").read_bytes()[:100])
    assert "not a readable parquet file" in check_data_files([f"data.train_files={torn}", val])
    broken = {  # rows VERL cannot score, through prepare_data's writer: {name}.parquet
        "no_source": [{"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": "2"}}],
        "no_truth": [{"prompt": "1+1?", "data_source": "arithmetic", "reward_model": {"style": "rule"}}],
    }
    no_source, no_truth = write_splits(broken, str(tmp_path)).values()
    assert check_data_files([val.replace("val", "train", 1), f"data.val_files={no_source}"]) == (
        f"data.val_files: {no_source}: row 0 has no 'data_source' field"
    )
    assert "has no 'ground_truth' field" in check_data_files([f"data.train_files={no_truth}", val])
    assert main([f"data.train_files={readme}", val]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: data.train_files=") and err.count("\n") == 1


@pytest.mark.slow
def test_launcher_verl_dry_run_refuses_typos_and_non_parquet_data(tmp_path, data_dir):
    env = launcher_env(tmp_path, DATA_DIR=data_dir, GROUP_SIZE=8, BUDGET=64, DRY_RUN=1)
    result = subprocess.run(["bash", str(LAUNCHER), "trainer.totl_epochs=2"], env=env, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        "error: override trainer.totl_epochs=2: VERL's configuration has no key trainer.totl_epochs "
        "(did you mean trainer.total_epochs?); a new key needs +trainer.totl_epochs=..."
    ]
    env["TRAIN_FILE"] = str(ROOT / "README.md")
    result = subprocess.run(["bash", str(LAUNCHER)], env=env, capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: data.train_files={ROOT / 'README.md'}: VERL reads parquet files")


@bounded(15)
@given(golds())
def test_the_trainer_reads_golds_by_the_answers_rule(case):
    """Issue 36, case 7: a training table's arithmetic gold that no answer can match is refused where TRL reads it."""
    from grpo_mse.errors import DataError
    from grpo_mse.training.data import verl_row, write_splits
    from grpo_mse.training.trl_backend import verl_rows

    text, verdict, _ = case
    with tempfile.TemporaryDirectory() as folder:
        rows = [verl_row(f"{i} + 0 =", gold, "arithmetic", "train", i) for i, gold in enumerate([5, text])]
        (path,) = write_splits({"train": rows}, folder).values()
        if verdict == WHOLE:
            assert [row["ground_truth"] for row in verl_rows(path)] == ["5", text]
        else:
            with pytest.raises(DataError, match=f"{re.escape(path)}: row 1 has ground_truth"):
                verl_rows(path)
