"""oracle V -> trace of covariance -> figures on the built-in policy; resume and torchrun give the same numbers."""

import glob
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from conftest import BUILTIN_POLICY, ROOT, tracecov_argv

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.commands import make_figures as make_figures_command
from grpo_mse.commands import oracle as oracle_command
from grpo_mse.commands import tracecov as tracecov_command
from grpo_mse.runs import tracecov as tracecov_job

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)

calculate_oracle_v = oracle_command
make_figures = make_figures_command
run_tracecov = tracecov_command


@pytest.fixture(scope="module")
def oracle_table(tmp_path_factory, builtin_policy):
    folder = tmp_path_factory.mktemp("e2e")
    data = folder / "data.jsonl"
    rows = make_rows(8, seed=5)
    rows[7] = {**rows[0], "id": 100}  # the same prompt twice under different ids
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = [
        "--model",
        BUILTIN_POLICY,
        "--dataset",
        str(data),
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--n_oracle",
        "24",
        "--batch_size",
        "20",
        "--out_dir",
        str(folder / "oracle"),
    ]
    calculate_oracle_v.main(common + ["--limit", "5"])
    calculate_oracle_v.main(common + ["--resume"])
    calculate_oracle_v.main(common[:-1] + [str(folder / "fresh")])
    return folder, data


def test_oracle_fields_and_resume_equals_fresh_run(oracle_table):
    folder, _ = oracle_table
    (resumed,), (fresh,) = glob.glob(str(folder / "oracle" / "*.jsonl")), glob.glob(str(folder / "fresh" / "*.jsonl"))
    assert os.path.basename(resumed).startswith("oracle_v_n24_tiny_policy_")
    lines = open(resumed).read().splitlines()
    assert lines == open(fresh).read().splitlines() and len(lines) == 8
    records = [json.loads(line) for line in lines]
    for r in records:
        assert {
            "id",
            "prompt",
            "ground_truth",
            "V_oracle",
            "n_oracle",
            "correct_count",
            "V_ci95_low",
            "V_ci95_high",
        } <= set(r)
        assert r["n_oracle"] == 24 and r["V_oracle"] == r["correct_count"] / 24
        assert r["V_ci95_low"] <= r["V_oracle"] <= r["V_ci95_high"]
    assert any(0 < r["V_oracle"] < 1 for r in records)


def _tracecov_args(table, out, *extra):
    return tracecov_argv(table, out, *extra, skip_plot=False, T=6, M=3, K_list=(2, 4), max_new_tokens=8, c1_batch=3)


@pytest.fixture(scope="module")
def tracecov_run(oracle_table):
    folder, _ = oracle_table
    (table,) = glob.glob(str(folder / "oracle" / "*.jsonl"))
    run_tracecov.main(_tracecov_args(table, folder / "tc", "--plot_path", str(folder / "tc")))
    (main_json,) = glob.glob(str(folder / "tc" / "tracecov_*[0-9].json"))
    return folder, table, main_json


def test_tracecov_outputs_have_every_documented_field(tracecov_run):
    folder, _, main_json = tracecov_run
    result = json.load(open(main_json))
    assert result["K_list"] == [2, 4]
    for key in ("conditional_on_x", "ci95", "sd"):
        assert set(result[key]) == {"naive", "grpo", "oracleV"} and all(len(v) == 2 for v in result[key].values())
    assert result["n_prompts"] == [6, 6] and result["config"]["M"] == 3 and "note" in result
    assert set(result["group_size_advisor"]["pooled"]) == {"c1", "c2", "c3", "K_star_paper", "K_star_exact", "K_best"}
    assert set(result["paired"]["ratio"]) == {"naive/oracleV", "grpo/oracleV", "naive/grpo"}
    for name, (top, bottom) in {"naive/grpo": ("naive", "grpo"), "naive/oracleV": ("naive", "oracleV")}.items():
        for i, ratio in enumerate(result["paired"]["ratio"][name]):  # the paired ratio of the run's mean MSEs
            assert ratio["estimate"] == pytest.approx(result["mse"][top][i] / result["mse"][bottom][i], rel=1e-9)
            assert ratio["interval"] == "studentized" and (not ratio["ci95"] or ratio["ci95"][0] <= ratio["ci95"][1])
    base = main_json[:-5]
    for k in (2, 4):
        detail = json.load(open(f"{base}_K{k}_detailed.json"))
        assert detail["K"] == k and set(detail["avg_traces"]) == {"naive", "grpo", "oracleV"}
        for p in detail["prompt_results"]:
            assert {"prompt_index", "prompt", "gold", "V_oracle", "K", "tr_cov"} <= set(p)
        assert detail["avg_traces"]["naive"] == pytest.approx(result["conditional_on_x"]["naive"][[2, 4].index(k)])
    table = pd.read_csv(f"{base}_per_prompt.csv")
    assert list(table.columns) == tracecov_job.TIDY_COLUMNS and len(table) == 2 * 6 * 3
    assert os.path.getsize(f"{base}.png") > 1000
    assert not glob.glob(f"{base}.progress*")
    # the duplicated prompt (ids 0 and 100) gets independent samples, hence different traces
    rows = table[(table.K == 4) & (table.estimator == "naive")].set_index("id")
    assert 100 not in rows.index or rows.loc[0, "trace"] != rows.loc[100, "trace"]
    make_figures.main(
        [
            "--tracecov",
            main_json,
            "--paper",
            os.path.join(ROOT, "results", "paper_figure4.csv"),
            "--out_dir",
            str(folder / "figs"),
        ]
    )
    assert os.path.getsize(folder / "figs" / "figure4.png") > 1000 and os.path.exists(folder / "figs" / "figure4.pdf")


def _per_prompt(main_json):
    return pd.read_csv(main_json[:-5] + "_per_prompt.csv").sort_values(["K", "prompt_index", "estimator"])


def test_resume_after_a_crash_gives_the_same_numbers(tracecov_run, monkeypatch):
    folder, table, main_json = tracecov_run
    original, calls = tracecov_job.TracecovRun.evaluate_prompt, []

    def crashing(*args, **kwargs):
        if len(calls) == 7:
            raise KeyboardInterrupt("simulated crash")
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(tracecov_job.TracecovRun, "evaluate_prompt", crashing)
    with pytest.raises(KeyboardInterrupt):
        run_tracecov.main(_tracecov_args(table, folder / "crash", "--skip_plot"))
    assert glob.glob(str(folder / "crash" / "*.progress*.jsonl")) and not glob.glob(str(folder / "crash" / "*0.json"))
    monkeypatch.setattr(tracecov_job.TracecovRun, "evaluate_prompt", original)
    run_tracecov.main(_tracecov_args(table, folder / "crash", "--skip_plot", "--resume"))
    (resumed,) = glob.glob(str(folder / "crash" / "tracecov_*[0-9].json"))
    pd.testing.assert_frame_equal(
        _per_prompt(resumed).reset_index(drop=True), _per_prompt(main_json).reset_index(drop=True)
    )
    assert (
        json.load(open(resumed))["group_size_advisor"]["pooled"]
        == json.load(open(main_json))["group_size_advisor"]["pooled"]
    )


def test_torchrun_two_processes_write_the_same_files(tracecov_run):
    folder, table, main_json = tracecov_run
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29533",
            os.path.join(ROOT, "Gradient_evaluation", "run_tracecov.py"),
            *_tracecov_args(table, folder / "ddp", "--skip_plot"),
        ],
        check=True,
        env=env,
        timeout=600,
        capture_output=True,
    )
    (merged,) = glob.glob(str(folder / "ddp" / "tracecov_*[0-9].json"))
    pd.testing.assert_frame_equal(
        _per_prompt(merged).reset_index(drop=True), _per_prompt(main_json).reset_index(drop=True), rtol=1e-6
    )
    merged_means, single_means = (json.load(open(path))["conditional_on_x"] for path in (merged, main_json))
    for name, values in single_means.items():
        assert merged_means[name] == pytest.approx(values, rel=1e-6)
    # 6 prompts on 2 ranks: 3 each (rank_batches), here the same c1 batches as one process ([0, 1, 2], [3, 4, 5])
    merged_c1, single_c1 = (json.load(open(path))["group_size_advisor"]["per_K"] for path in (merged, main_json))
    for k, constants in single_c1.items():
        assert merged_c1[k]["n_c1_batches"] == constants["n_c1_batches"] == 2
        assert merged_c1[k]["c1"]["estimate"] == pytest.approx(constants["c1"]["estimate"], rel=1e-6)
