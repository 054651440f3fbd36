"""The advisor-vs-training check: its summaries (studies.advisor.k_validation), the runs that count
(grpo_mse.training.runs_table), its data subsets (grpo_mse.training.data) and its CLI (scripts/k_validation.py)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from grpo_mse.errors import DataError
from grpo_mse.training.runs_table import select_runs
from studies.advisor import k_validation as kv
from studies.advisor.training_runs import pilot_gain, run_means, subset

METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "k_validation.py"


@given(
    values=st.lists(st.floats(0, 1), min_size=2, max_size=4),
    metric=st.sampled_from(["val-core/arithmetic/acc/mean@1", "val/test_reward", "eval/accuracy/mean"]),
)
def test_accuracy_intervals_stay_in_0_1_and_other_metrics_keep_the_t_interval(values, metric):
    mean, half = kv.mean_t_interval(values)
    low, high = kv.share_interval(metric, mean, half)
    if kv.ACCURACY.search(metric):
        assert 0.0 <= low <= mean <= high <= 1.0 and (low == 0.0 or low == pytest.approx(mean - half))
    else:
        assert (low, high) == (mean - half, mean + half)


def frame_of(acc: dict, steps=(0, 3, 6)) -> pd.DataFrame:
    """Collected rows: step 0 at 0.05 for every run, then acc[(K, seed)] + step/1000."""
    rows = []
    for (k, seed), value in acc.items():
        for step in steps:
            rows.append(
                {
                    "K": k,
                    "seed": seed,
                    "step": step,
                    "metric": METRIC,
                    "value": 0.05 if step == 0 else value + step / 1000,
                }
            )
            rows.append({"K": k, "seed": seed, "step": step, "metric": "critic/rewards/mean", "value": 9.0})
    return pd.DataFrame(rows)


def test_sweep_summary_metric_intervals_and_separation():
    acc = {(2, s): 0.10 + 0.001 * s for s in range(4)}
    acc.update({(8, s): 0.20 + 0.001 * s for s in range(4)})
    acc.update({(4, s): 0.10 + 0.1 * (s % 2) for s in range(4)})  # wide: separated from nothing
    out = kv.sweep_summary(run_means(frame_of(acc), METRIC), METRIC, "2026-01-01T00:00:00Z")
    k2 = out.per_K["2"]
    expected = np.mean([0.10 + 0.001 * s + 0.0045 for s in range(4)])  # mean of steps 3 and 6 only, step 0 left out
    assert k2["mean"] == pytest.approx(expected) and k2["n_seeds"] == 4
    half = stats.t.ppf(0.975, 3) * np.std([0.001 * s for s in range(4)], ddof=1) / 2
    assert k2["ci95"] == pytest.approx([expected - half, expected + half], abs=1e-4)
    assert out.best_K == 8
    assert out.separated_pairs == [[2, 8]]
    assert out.started_at == "2026-01-01T00:00:00Z"


def test_unfinished_runs_are_left_out(capsys):
    acc = {(2, 0): 0.1, (2, 1): 0.2, (4, 0): 0.3}
    frame = frame_of(acc, steps=(0, 3, 6))
    frame = frame[~((frame["K"] == 2) & (frame["seed"] == 1) & (frame["step"] == 6))]  # seed 1 stopped after step 3
    runs = run_means(frame, METRIC)
    assert sorted(map(tuple, runs[["K", "seed"]].values.tolist())) == [(2, 0), (4, 0)]
    assert runs["value"].tolist() == pytest.approx([0.1045, 0.3045])
    assert "note: left out 1 run(s): K=2 seed=1: did not log step 6 (last step 3)" in capsys.readouterr().err
    interrupted = frame.assign(status=["interrupted" if k == 4 else "complete" for k in frame["K"]])
    runs = run_means(interrupted, METRIC)  # a recorded interruption is left out even at full length
    assert sorted(map(tuple, runs[["K", "seed"]].values.tolist())) == [(2, 0)]
    assert "K=4 seed=0: interrupted" in capsys.readouterr().err


def test_one_rule_decides_which_runs_count(capsys):
    """The sweep mean, the adaptive summary and the pilot ask training.runs_table.select_runs (Table 2's rule)
    which runs count, each for the steps it reads: the sweep mean reads every validation step after 0, so a run
    that stopped early is left out (never averaged over fewer steps); the pilot reads the common step, so it is
    compared there; an interrupted run is left out of both; a table mixing budgets is refused by both."""
    complete = frame_of({(2, 0): 0.1, (4, 0): 0.3}, steps=(0, 3, 6))
    short = frame_of({(8, 0): 0.5}, steps=(0, 3))  # stopped after step 3, completeness not recorded
    broken = frame_of({(16, 0): 0.0}, steps=(0, 3, 6)).assign(status="interrupted")
    frame = pd.concat([complete, short, broken], ignore_index=True)
    runs = run_means(frame, METRIC)
    chosen = select_runs(frame[frame["step"] > 0], METRIC, steps=[3, 6])
    assert set(map(tuple, runs[["K", "seed"]].values.tolist())) == {(2, 0), (4, 0)}
    assert set(zip(chosen.frame["K"], chosen.frame["seed"])) == {(2, 0), (4, 0)}
    err = capsys.readouterr().err
    assert "K=8 seed=0: did not log step 6 (last step 3)" in err and "K=16 seed=0: interrupted" in err
    assert pilot_gain(frame, METRIC) == pytest.approx(np.mean([0.103, 0.303, 0.503]) - 0.05)
    assert "K=16 seed=0: interrupted" in capsys.readouterr().err
    mixed = complete.assign(budget=[128 if k == 2 else 256 for k in complete["K"]])
    for read in (run_means, pilot_gain):
        with pytest.raises(DataError, match="runs at 2 settings"):
            read(mixed, METRIC)


def advisor_run(c1=15.0, c2=160.0, c3=380.0):
    k_star = 1 + math.sqrt(c3 / c1)
    return {
        "group_size_advisor": {
            "pooled": {"c1": c1, "c2": c2, "c3": c3, "K_star_exact": k_star, "K_star_paper": k_star - 1, "K_best": 8.0},
            "ci95": {
                "c1": [5, 30],
                "c2": [80, 400],
                "c3": [160, 800],
                "K_star_exact": [5.4, 8.0],
                "K_best": [4.0, 8.0],
            },
            "budget": 128,
            "allowed_K": [2, 4, 8, 16],
        }
    }


def test_setting_summary_schema_and_rank_correlation():
    pred = kv.predict(advisor_run(), "s", written_at="2026-01-01T00:00:00Z")
    assert pred.best_allowed_K == 8 and pred.ci95 == [5.4, 8.0]
    acc = {(k, s): {2: 0.10, 4: 0.14, 8: 0.16, 16: 0.15}[k] + 0.002 * s for k in (2, 4, 8, 16) for s in range(3)}
    out = kv.setting_summary("s", run_means(frame_of(acc), METRIC), pred, "t", METRIC)
    assert set(out.advisor.to_json()) == {
        "identified",
        "message",
        "K_star_exact",
        "ci95",
        "best_allowed_K",
        "written_at",
    }
    assert set(out.sweep.to_json()) == {"metric", "per_K", "best_K", "started_at", "separated_pairs"}
    # predicted error at K = 2, 4, 8, 16: 570, 346.7, 334.3, 425.3 -> ranks 4, 2, 1, 3; accuracy ranks 1, 2, 4, 3
    assert out.rank_correlation.spearman_predicted_error_vs_metric == pytest.approx(-0.8)


def test_subset_keeps_the_asked_kinds(tmp_path):
    def row(i, problem):
        return {
            "data_source": "arithmetic_zero_shot",
            "ability": "math",
            "prompt": [{"role": "user", "content": f"Solve the arithmetic problem.\n{problem}"}],
            "reward_model": {"style": "rule", "ground_truth": "1"},
            "extra_info": {"index": i},
        }

    problems = ["24 / 8 =", "12 + 3 - 4 =", "50 - (18 + 7) =", "96 / 8 =", "12 * 7 =", "9 / 3 ="]
    for split in ("train", "test"):
        pd.DataFrame([row(i, p) for i, p in enumerate(problems)]).to_parquet(tmp_path / f"{split}.parquet")
    counts = subset(str(tmp_path), str(tmp_path / "div"), "division", n_test=2)
    assert counts == {"train": 3, "test": 2}
    test = pd.read_parquet(tmp_path / "div" / "test.parquet")
    assert [p[-1]["content"].split("\n")[-1] for p in test["prompt"]] == ["24 / 8 =", "96 / 8 ="]
    assert subset(str(tmp_path), str(tmp_path / "nodiv"), "nodivision", n_test=3) == {"train": 3, "test": 3}
    with pytest.raises(Exception, match="fewer than --n_test"):
        subset(str(tmp_path), str(tmp_path / "x"), "division", n_test=4)


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True)


def test_cli_predict_and_summarize(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(advisor_run()))
    done = run_cli("predict", "run.json", "--name", "a", "--out", "pred.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    pred = json.loads((tmp_path / "pred.json").read_text())
    assert pred["written_at"].endswith("Z") and pred["K_star_exact"] == pytest.approx(1 + math.sqrt(380 / 15))
    acc = {(k, s): 0.1 + 0.01 * (k == 8) + 0.001 * s for k in (2, 4, 8, 16) for s in range(3)}
    frame_of(acc).to_csv(tmp_path / "runs.csv", index=False)
    done = run_cli("summarize", "--setting", "a", "runs.csv", "pred.json", "t", "--out_dir", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["settings"][0]["sweep"]["best_K"] == 8
    assert (tmp_path / "out" / "sweep_a.png").stat().st_size > 0
    # bad input: one line on stderr, exit 2, nothing written
    (tmp_path / "bad.json").write_text(json.dumps({"K_list": [2]}))
    done = run_cli("predict", "bad.json", "--name", "a", "--out", "p2.json", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error:") and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p2.json").exists()


def test_pilot_gain_and_cli(tmp_path):
    acc = {(2, 100): 0.15, (16, 100): 0.25}
    frame = frame_of(acc, steps=(0, 3, 6))  # step 0 at 0.05, last step acc + 0.006
    assert pilot_gain(frame, METRIC) == pytest.approx(np.mean([0.156, 0.256]) - 0.05)
    frame.to_csv(tmp_path / "p.csv", index=False)
    assert run_cli("pilot", "p.csv", cwd=tmp_path).returncode == 0
    assert run_cli("pilot", "p.csv", "--min_gain", "0.2", cwd=tmp_path).returncode == 1


def test_pilot_gain_at_the_common_step(tmp_path):
    """A run that stopped at step 3 of 6 (completeness not recorded) is compared with the others at step 3, not
    at its own last step; an interrupted run is left out (Table 2's rule). The old first/last rule gave
    mean(0.906 - 0.05, 0.253 - 0.05) here."""
    frame = frame_of({(2, 100): 0.9}, steps=(0, 3, 6))  # 0.05, 0.903, 0.906
    short = frame_of({(16, 100): 0.25}, steps=(0, 3))  # 0.05, 0.253
    broken = frame_of({(4, 100): 0.0}, steps=(0, 3, 6)).assign(status="interrupted")  # would pull the mean down
    frame = pd.concat([frame, short, broken], ignore_index=True)
    gain = pilot_gain(frame, METRIC)
    assert gain == pytest.approx(np.mean([0.903 - 0.05, 0.253 - 0.05]))
    frame.to_csv(tmp_path / "p.csv", index=False)
    done = run_cli("pilot", "p.csv", cwd=tmp_path)
    assert done.returncode == 0 and "K=4 seed=100: interrupted" in done.stderr
    assert f"mean gain {gain:+.3f}" in done.stdout


def test_compare_directions_of_advisor_and_sweep():
    def summary(name, k_star, best):
        return SimpleNamespace(
            name=name, advisor=SimpleNamespace(K_star_exact=k_star), sweep=SimpleNamespace(best_K=best)
        )

    low, high = np.full(100, 4), np.full(100, 16)
    out = kv.compare(summary("a", 4.2, 4), summary("b", 6.5, 16), low, high)
    assert out.advisor_direction == 1 and out.sweep_direction == 1 and out.agree
    assert out.bootstrap_best_K_shares == {"advisor_way": 1.0, "opposite_way": 0.0, "no_move": 0.0}
    out = kv.compare(summary("a", 6.5, 4), summary("b", 4.2, 16), low, high)  # the sweep moves against the advisor
    assert out.advisor_direction == -1 and not out.agree
    assert out.bootstrap_best_K_shares["opposite_way"] == 1.0
    mixed = np.array([4] * 30 + [8] * 50 + [16] * 20)  # against a first setting always at 8
    shares = kv.compare(summary("a", 4.2, 8), summary("b", 6.5, 8), np.full(100, 8), mixed).bootstrap_best_K_shares
    assert shares == pytest.approx({"advisor_way": 0.2, "opposite_way": 0.3, "no_move": 0.5})


def _two_settings(first, second):
    """``--setting`` twice: runs_a.csv / pred_a.json named ``first``, runs_b.csv / pred_b.json named ``second``."""
    return ["--setting", first, "runs_a.csv", "pred_a.json", "t", "--setting", second, "runs_b.csv", "pred_b.json", "t"]


def test_cli_summarize_two_settings_compares_them(tmp_path):
    for name, c3, peak in (("a", 200.0, 4), ("b", 600.0, 16)):
        (tmp_path / f"run_{name}.json").write_text(json.dumps(advisor_run(c3=c3)))
        assert (
            run_cli(
                "predict", f"run_{name}.json", "--name", name, "--out", f"pred_{name}.json", cwd=tmp_path
            ).returncode
            == 0
        )
        acc = {(k, s): 0.1 + 0.02 * (k == peak) + 0.001 * s for k in (2, 4, 8, 16) for s in range(4)}
        frame_of(acc).to_csv(tmp_path / f"runs_{name}.csv", index=False)
    done = run_cli("summarize", *_two_settings("a", "b"), "--out_dir", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [s["sweep"]["best_K_bootstrap"] for s in summary["settings"]] == [{"4": 1.0}, {"16": 1.0}]
    (comparison,) = summary["comparisons"]
    assert comparison["settings"] == ["a", "b"] and comparison["agree"]
    assert comparison["advisor_K_star"] == pytest.approx([1 + math.sqrt(200 / 15), 1 + math.sqrt(600 / 15)])
    assert (tmp_path / "out" / "sweep_settings.png").stat().st_size > 0
    done = run_cli("summarize", *_two_settings("a", "a"), "--out_dir", "out2", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error:") and "repeat" in done.stderr
    assert not (tmp_path / "out2").exists()
    assert "protocol_commit" not in summary
    done = run_cli(
        "summarize", *_two_settings("a", "b"), "--out_dir", "out3", "--protocol_commit", "4cb6f9c", cwd=tmp_path
    )
    assert json.loads((tmp_path / "out3" / "summary.json").read_text())["protocol_commit"] == "4cb6f9c"
    done = run_cli(
        "summarize", *_two_settings("a", "b"), "--out_dir", "out4", "--protocol_commit", "HEAD", cwd=tmp_path
    )
    assert done.returncode == 2 and "give a git commit hash" in done.stderr and not (tmp_path / "out4").exists()


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"KVAL_SETTINGS": "train_mixed_t0"}, "setting train_mixed_t0: the temperature must be positive"),
        ({"KVAL_SETTINGS": "train_mixed_lr2"}, "setting train_mixed_lr2: the learning rate must be in (0, 1)"),
        ({"KVAL_SETTINGS": "train_mixed_tx"}, "setting train_mixed_tx: use POLICY_KINDS[_tTEMP][_lrLR]"),
        ({"KVAL_PILOT_SEEDS": "3"}, "pilot seed 3 is also a sweep seed"),
    ],
)
def test_script_refuses_bad_settings_before_writing(tmp_path, settings, message):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "KVAL_WORK": str(tmp_path / "work"), "KVAL_RESULTS": str(tmp_path / "results"), **settings}
    done = subprocess.run(
        ["bash", str(root / "scripts" / "k_validation.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "work").exists() and not (tmp_path / "results").exists()


def test_settings_are_resampled_independently(tmp_path):
    """Two settings with the same runs: with shared resampling indices the best K would never move (100% "no
    move"); resampled independently it moves in a share of the replicates (issue 27: 27%/34% -> 30%/37%)."""
    acc = {
        (k, s): {2: 0.10, 4: 0.15, 8: 0.15, 16: 0.12}[k] + 0.01 * ((s * 7 + k) % 5)
        for k in (2, 4, 8, 16)
        for s in range(4)
    }
    csv = tmp_path / "runs.csv"
    frame_of(acc).to_csv(csv, index=False)
    pred = tmp_path / "p.json"
    pred.write_text(json.dumps(kv.predict(advisor_run(), "s", written_at="t").to_json()))
    done = run_cli(
        "summarize",
        "--setting",
        "a",
        str(csv),
        str(pred),
        "t",
        "--setting",
        "b",
        str(csv),
        str(pred),
        "t",
        "--out_dir",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    shares = json.loads((tmp_path / "out" / "summary.json").read_text())["comparisons"][0]["bootstrap_best_K_shares"]
    assert 0.05 < shares["no_move"] < 0.95


def test_script_never_writes_the_committed_results_by_default(tmp_path):
    """Issue 25 case 1: a small test run modified results/k_validation, then crashed. The default is now under
    outputs/, and a folder of committed results is refused (one line, nothing written) without KVAL_OVERWRITE=1."""
    root = Path(__file__).resolve().parents[2]
    script = root / "scripts" / "k_validation.sh"
    assert "KVAL_RESULTS (outputs/k_validation_results;" in script.read_text()
    before = subprocess.run(["git", "status", "--porcelain", "results"], cwd=root, capture_output=True, text=True)
    for results in ("results/k_validation", str(root / "results" / "k_validation")):
        env = {
            **os.environ,
            "KVAL_WORK": str(tmp_path / "work"),
            "KVAL_RESULTS": results,
            "KVAL_SETTINGS": "tiny_mixed",
            "KVAL_STAGES": "advisor",
            "KVAL_ADVISOR_T": "3",
        }
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=root)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "holds committed results (tracked by git); set KVAL_OVERWRITE=1" in done.stderr
        assert not (tmp_path / "work").exists()
    after = subprocess.run(["git", "status", "--porcelain", "results"], cwd=root, capture_output=True, text=True)
    assert after.stdout == before.stdout


@pytest.mark.parametrize("split, expected", [(None, "train.parquet"), ("test", "test.parquet")])
def test_advisor_prompts_are_a_seeded_sample_of_the_training_set(tmp_path, split, expected):
    """Issue 27 item 3: the advisor's oracle table is a random sample (--sample T --seed S) of the setting's
    training set by default, not the first held-out rows. A stand-in python logs each command (the stage stops
    when no run file appears)."""
    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "commands.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n')
    fake.chmod(0o755)
    env = {
        **os.environ,
        "KVAL_PYTHON": str(fake),
        "KVAL_WORK": str(tmp_path / "work"),
        "KVAL_RESULTS": str(tmp_path / "results"),
        "KVAL_SETTINGS": "train_mixed",
        "KVAL_STAGES": "advisor",
        "KVAL_ADVISOR_SEED": "7",
        **({"KVAL_ADVISOR_SPLIT": split} if split else {}),
    }
    subprocess.run(["bash", str(root / "scripts" / "k_validation.sh")], env=env, capture_output=True, timeout=60)
    (oracle,) = [line for line in log.read_text().splitlines() if "calculate_oracle_v.py" in line]
    assert f"data_mixed/{expected} " in oracle and "--sample 48 --seed 7 " in oracle and "--limit" not in oracle
    (advisor,) = [line for line in log.read_text().splitlines() if "run_tracecov.py" in line]
    assert "--estimators grpo oracleV grpo_std --advisor_estimator grpo_std" in advisor  # TRL's estimator


def test_script_refuses_a_bad_advisor_split(tmp_path):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "KVAL_WORK": str(tmp_path / "w"), "KVAL_RESULTS": str(tmp_path / "r")}
    done = subprocess.run(
        ["bash", str(root / "scripts" / "k_validation.sh")],
        env={**env, "KVAL_ADVISOR_SPLIT": "valid"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "KVAL_ADVISOR_SPLIT=valid: use train or test" in done.stderr
    assert not (tmp_path / "w").exists()


def test_prediction_carries_the_measured_std_grpo_best_k_only_where_identified():
    run = advisor_run()
    assert kv.predict(run, "s", written_at="t").estimator == "grpo"
    curve = {"estimator": "grpo_std", "K": [2, 4], "K_best": 4, "identified": True, "message": "best measured K = 4"}
    run["group_size_advisor"]["measured_curve"] = curve
    pred = kv.predict(run, "s", written_at="t")
    assert (pred.estimator, pred.measured_K_best) == ("grpo_std", 4)
    for unidentified in ({"identified": False, "K_best": None}, {"identified": "yes"}, {"identified": None}):
        run["group_size_advisor"]["measured_curve"] = {**curve, **unidentified}
        assert kv.predict(run, "s", written_at="t").measured_K_best is None


@pytest.mark.parametrize("setting", ["bogus", "train_mixed_t", "train_fewshot", "tiny_mixed_t1.5x"])
def test_regen_script_refuses_a_bad_setting_before_any_work(tmp_path, setting):
    """regen.sh checks every setting first: one error line, exit 2, nothing written (not even the data)."""
    source = Path(__file__).resolve().parents[2] / "results/k_validation/regenerated/regen.sh"
    script = tmp_path / "results/k_validation/regenerated/regen.sh"
    script.parent.mkdir(parents=True)
    script.write_text(source.read_text())
    done = subprocess.run(["bash", str(script), "train_mixed", setting], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith("error: setting")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "results/k_validation/regenerated/regen.sh"
    ]
