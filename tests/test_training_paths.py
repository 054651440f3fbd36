"""The training paths a user takes after the demo (issue 17): a real sweep starts, logs and checkpoints are one per
run, the collector reads TRL's progress-bar lines and refuses what it cannot read right, TRL refuses settings that
cannot train, one seed gives "n/a", and a mistyped demo setting leaves the repository byte-identical."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_mse.tables.inputs import DataError
from grpo_mse.training.logs import collect, parse_console
from grpo_mse.training.sweep import plan, run_env

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "Policy_Optimization" / "sweep_group_size.py"
LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"
ACC = "val-core/arithmetic_zero_shot/acc/mean@1"
SCORE = "critic/score/mean"
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
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


def one_line_error(result) -> None:
    lines = result.stderr.strip().split("\n")  # a generated value may hold other line breaks (\x85, \u2028)
    assert result.returncode == 2 and len(lines) == 1 and "error:" in lines[0], (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr


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
    from grpo_mse.training.data import arithmetic_splits, write_parquet

    folder = tmp_path_factory.mktemp("a,b")  # a comma in the data path (Hydra syntax unless quoted)
    for split, rows in arithmetic_splits(8, 4).items():
        write_parquet(rows, str(folder / f"{split}.parquet"))
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
    from grpo_mse.training.data import write_parquet
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
    no_source = tmp_path / "no_source.parquet"
    write_parquet(
        [{"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": "2"}}], str(no_source)
    )
    assert check_data_files([val.replace("val", "train", 1), f"data.val_files={no_source}"]) == (
        f"data.val_files: {no_source}: row 0 has no 'data_source' field"
    )
    no_truth = tmp_path / "no_truth.parquet"
    write_parquet([{"prompt": "1+1?", "data_source": "arithmetic", "reward_model": {"style": "rule"}}], str(no_truth))
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


# Hypothesis: generated console logs. Either the collector returns exactly the logged values, or it refuses with a
# DataError (one line in the scripts); it never returns a wrong value.
PREFIXES = st.sampled_from(
    [
        "",
        "(TaskRunner pid=12) ",
        "\r 50%|#####     | 4/8 [00:00<00:00, 29.09it/s]",
        "\r100%|##########| 8/8 [00:01<00:00,  6.20it/s]\n",
    ]
)
VALUES = st.one_of(
    st.floats(min_value=0, max_value=1, allow_nan=False).map(lambda x: round(x, 6)),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


@st.composite
def console_logs(draw):
    steps = draw(st.integers(min_value=1, max_value=6))
    truth, lines = {}, []
    for step in range(steps):
        acc, score = draw(VALUES), draw(VALUES)
        truth[(step, ACC)], truth[(step, SCORE)] = acc, score
        fmt = draw(st.sampled_from(["{:.6g}", "np.float64({:.6g})", "{!r}"]))
        parts = [
            f"step:{step}",
            f"actor/pg_loss:{draw(VALUES)}",
            f"{SCORE}:{fmt.format(score)}",
            f"training/global_step:{step}",
            f"{ACC}:{fmt.format(acc)}",
        ]
        lines.append(draw(PREFIXES) + " - ".join(parts) + "\n")
    tear = draw(st.sampled_from(["none", "last", "glue"]))
    where = draw(st.integers(min_value=0, max_value=len(lines) - 1))
    cut = draw(st.integers(min_value=1, max_value=max(1, len(lines[where]) - 1)))
    if tear == "last":
        lines = lines[: where + 1]
        lines[-1] = lines[-1][:cut].rstrip("\n")
    elif tear == "glue" and where + 1 < len(lines):
        lines[where] = lines[where][:cut].rstrip("\n")  # the rest of the line is lost, the next one runs on
    header = "[grpo_train] TRAINER=trl EXPERIMENT_NAME=x GROUP_SIZE=4 SEED=0 BUDGET=32\n"
    return header + "".join(lines), truth


@PROPERTY
@given(case=console_logs())
def test_generated_console_logs_parse_right_or_are_refused(case):
    text, truth = case
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the unterminated last line is skipped with a warning
            records = parse_console(text, r"^(val-core/|critic/score/mean$)", source="gen.log")
    except DataError as error:
        assert "\n" not in str(error) and str(error).startswith("gen.log")
        return
    for step, metric, value in records:  # every value returned is exactly what was logged, and finite
        assert math.isfinite(value) and value == pytest.approx(truth[(step, metric)], rel=1e-5)
    assert len({(s, m) for s, m, _ in records}) == len(records)


# ---------------------------------------------------------------- figures: one seed, bad CSV


def test_one_seed_says_n_a_and_a_bad_csv_is_one_line(tmp_path):
    from grpo_mse.figures.training import table2
    from grpo_mse.training.demo_summary import summary

    frame = pd.DataFrame(
        {
            "K": [4, 4, 8, 8],
            "seed": [0, 0, 0, 0],
            "step": [0, 2, 0, 2],
            "metric": [ACC] * 4,
            "value": [0.25, 0.5, 0.25, 0.375],
        }
    )
    table = table2(frame)
    assert "**50.00 ± n/a**" in table and "37.50 ± n/a" in table and "± 0.00" not in table
    assert "| 4 | 1 | 0.250 ± n/a | 0.500 ± n/a | 0.250 ± n/a |" in summary(frame)
    two = pd.concat([frame, frame.assign(seed=1, value=frame["value"] + 0.125)])
    assert "n/a" not in table2(two)
    bad = tmp_path / "bad.csv"
    bad.write_text(f"K,seed,step,metric,value\nfour,0,1,{ACC},0.5\n")
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "plots" / "make_figures.py"),
            "--training_csv",
            str(bad),
            "--out_dir",
            str(tmp_path / "fig"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(result)
    assert "row 2: K 'four' is not a whole number" in result.stderr and not (tmp_path / "fig").exists()


@pytest.mark.parametrize(
    "row, message",
    [
        (f"2,1,-1,{ACC},0.5", "row 3: step -1 must be >= 0"),
        (f"0,1,1,{ACC},0.5", "row 3: K 0 must be >= 1"),
        (f"2,-2,1,{ACC},0.5", "row 3: seed -2 must be >= 0 (-1: default)"),
        (f"2,1,1,{ACC},1.5", f"row 3: {ACC} 1.5 is not an accuracy in [0, 1]"),
        (f"2,1,1,{ACC},-0.25", f"row 3: {ACC} -0.25 is not an accuracy in [0, 1]"),
    ],
)
def test_table2_refuses_out_of_range_rows(tmp_path, row, message):
    """User sweep (issue 25): a negative step moved Table 2's common step to 0, an accuracy of 150 (a percent
    typed for a share) printed 15000%. Out-of-range rows are refused naming the row; a reward metric may leave
    [0, 1]."""
    from grpo_mse.training.runs_table import read_training

    bad = tmp_path / "bad.csv"
    bad.write_text(f"K,seed,step,metric,value\n2,1,0,{ACC},0.25\n{row}\n")
    with pytest.raises(DataError) as refused:
        read_training(str(bad))
    assert str(refused.value) == f"{bad} {message}"
    reward = tmp_path / "reward.csv"
    reward.write_text(
        "K,seed,step,metric,value\n2,1,0,val-core/x/reward/mean@1,-1.5\n2,1,1,val-core/x/reward/mean@1,3\n"
    )
    assert list(read_training(str(reward))["value"]) == [-1.5, 3.0]


# ---------------------------------------------------------------- demos: a mistyped setting changes nothing


def repository_state() -> str:
    """Tracked changes, untracked and ignored files (caches aside): equal before and after means byte-identical
    tracked files and nothing new."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "\n".join(line for line in out.splitlines() if "__pycache__" not in line and ".pytest_cache" not in line)


DEMO_CASES = [
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_MODEL": "assets/tiny_polcy"}, "DEMO_MODEL=assets/tiny_polcy"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_OUT": "results/demo"}, "committed results"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_T": "1O"}, "DEMO_T must be an integer"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_OUT": "README.md"}, "is a file"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_OVERWRITE": "yes"}, "DEMO_OVERWRITE must be 0 or 1"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER": "2"}, "DEMO_PAPER must be 0 or 1"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER_M": "1"}, "DEMO_PAPER_M must be an integer >= 2"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER_K_LIST": "4 1"}, "DEMO_PAPER_K_LIST must be an integer >= 2"),
    ("demo.sh", {"DEMO_INSTALL": "0", "DEMO_PAPER_MODEL": "assets/paper_polcy"}, "DEMO_PAPER_MODEL=assets/paper_polcy"),
    ("theory_demo.sh", {"THEORY_MODEL": "assets/tiny_polcy"}, "THEORY_MODEL=assets/tiny_polcy"),
    ("theory_demo.sh", {"THEORY_OUT": "results/theory"}, "committed results"),
    ("theory_demo.sh", {"THEORY_TABLE_OUT": "results/estimators"}, "committed results"),
    ("train_demo.sh", {"DEMO_MODEL": "assets/train_polcy"}, "not a model folder"),
    ("train_demo.sh", {"DEMO_K_LIST": "4 x"}, "'x' is not a positive integer"),
    ("train_demo.sh", {"DEMO_K_LIST": "3"}, "must divide"),
    ("train_demo.sh", {"DEMO_LR": "1e6"}, "below 1"),
    ("train_demo.sh", {"DEMO_SEEDS": "-1"}, "not a non-negative integer"),
    ("train_demo.sh", {"DEMO_RESULTS": "results/training_demo"}, "committed results"),
    ("train_demo.sh", {"DEMO_PYTHON": "no-such-python"}, "not found"),
]


@pytest.mark.parametrize("script,settings_,message", DEMO_CASES)
def test_mistyped_demo_setting_leaves_the_repository_byte_identical(script, settings_, message):
    before = repository_state()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEMO_", "THEORY_"))}
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / script)],
        env={**env, **settings_},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(result)
    assert message in result.stderr
    assert repository_state() == before


def test_staged_output_is_published_only_on_success(tmp_path):
    """demo_guard.sh: a failing step leaves the old folder as it was and no staging folder behind."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".grpo_mse_demo").write_text("old")
    (out / "old.txt").write_text("old result")
    script = (
        'source "$1"; stage_output "$2" S; echo new > "$S/new.txt"; [ "$3" = ok ] || exit 3; publish_output "$S" "$2"'
    )
    guard = str(ROOT / "scripts" / "demo_guard.sh")
    failed = subprocess.run(["bash", "-c", script, "x", guard, str(out), "fail"], cwd=tmp_path, timeout=60)
    assert failed.returncode == 3 and sorted(os.listdir(out)) == [".grpo_mse_demo", "old.txt"]
    assert sorted(os.listdir(tmp_path)) == ["out"]
    done = subprocess.run(["bash", "-c", script, "x", guard, str(out), "ok"], cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and sorted(os.listdir(out)) == [".grpo_mse_demo", "new.txt"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


@PROPERTY
@given(t=st.text(max_size=6), m=st.text(max_size=4), k=st.text(max_size=8))
def test_generated_demo_settings_run_or_refuse_without_changing_anything(t, m, k):
    """Generated DEMO_T / DEMO_M / DEMO_K_LIST with one certainly invalid value: exit 2, one line, nothing written."""
    import re

    t, m, k = t or "192", m or "8", k or "2 4 8 16"  # an empty setting means the default
    words = [w for w in re.split(r"[ \t\n]+", k) if w]  # bash's word splitting
    valid = bool(re.fullmatch(r"[0-9]+", t)) and int(t) >= 1 and bool(re.fullmatch(r"[0-9]+", m)) and int(m) >= 2
    valid = valid and bool(words) and all(re.fullmatch(r"[0-9]+", x) and int(x) >= 2 for x in words)
    if valid or "\x00" in t + m + k:
        return  # a valid setting would start the real demo; NUL cannot be in an environment variable
    before = repository_state()
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith("DEMO_")}
    env.update(DEMO_INSTALL="0", DEMO_T=t, DEMO_M=m, DEMO_K_LIST=k, DEMO_OUT="outputs/generated_demo_case")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    one_line_error(result)
    assert repository_state() == before
