"""Issue 25 case 8: inputs checked where they are read. A mistyped local model path is one line without hub retries;
a launcher variable whose name is close to a setting's is refused naming the setting; the launcher refuses
overrides that would change the identity it records."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from grpo_mse import cli
from grpo_mse.commands import make_figures as make_figures_command
from grpo_mse.commands import oracle as oracle_command
from grpo_mse.errors import UsageError
from grpo_mse.policy.model_source import check_model_path
from studies.advisor.simulated_records import simulated_prompt

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "Policy_Optimization" / "grpo_train.sh"


def launch(tmp_path, *args, **settings):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_text("x")
    env = {k: v for k, v in os.environ.items() if k not in ("GROUP_SIZE", "SEED", "LR", "BUDGET", "MODEL")}
    env.update({"DRY_RUN": "print", "TRAINER": "trl", "MODEL": "assets/tiny_policy", "DATA_DIR": str(data), **settings})
    return subprocess.run(["bash", str(LAUNCHER), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def one_line(result, message):
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_mistyped_local_model_path_is_one_line_without_hub_retries(tmp_path, monkeypatch):
    """MODEL=assets/tiny_polcy was tried as a hub id for ~50 s; assets/ is a local folder of models."""
    monkeypatch.chdir(ROOT)
    with pytest.raises(
        UsageError, match=r"model folder not found: assets/tiny_polcy \(did you mean assets/tiny_policy\?\)"
    ):
        check_model_path("assets/tiny_polcy")
    assert check_model_path("assets/tiny_policy") is True
    assert check_model_path("Qwen/Qwen2.5-1.5B-Instruct") is False  # a hub id: no local folder named Qwen
    one_line(launch(tmp_path, MODEL="assets/tiny_polcy"), "MODEL=assets/tiny_polcy: no such local folder")


@pytest.mark.parametrize(
    "name, closest",
    [
        ("GROUPSIZE", "GROUP_SIZE"),
        ("group_size", "GROUP_SIZE"),
        ("GROUP_SIZ", "GROUP_SIZE"),
        ("BUDGT", "BUDGET"),
        ("DATADIR", "DATA_DIR"),
        ("TEMPERTURE", "TEMPERATURE"),
        ("MAX_RESPONSE_LENTGH", "MAX_RESPONSE_LENGTH"),
    ],
)
def test_a_launcher_variable_close_to_a_setting_is_refused(tmp_path, name, closest):
    """GROUPSIZE=8 silently ran the default K=32."""
    one_line(launch(tmp_path, **{name: "8"}), f"{name} is not a setting of this script (did you mean {closest}?)")


def test_settings_and_unrelated_variables_pass(tmp_path):
    result = launch(tmp_path, GROUP_SIZE="8", SEEDS="1", MY_OWN_VARIABLE="x", GPU="1")
    assert result.returncode == 0, result.stderr
    assert "[grpo_train] settings: TRAINER=trl GROUP_SIZE=8 SEED=default BUDGET=1024 LR=1e-6" in result.stdout


@pytest.mark.parametrize("override", ["data.seed=3", "--seed", "actor_rollout_ref.actor.optim.lr=1e-5", "--lr=1e-5"])
def test_overrides_that_change_the_recorded_identity_are_refused(tmp_path, override):
    one_line(launch(tmp_path, override), f"override {override} contradicts SEED/LR")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    """--out_dir that could not be created failed only after the model loaded (os.access says yes to root on
    /proc); the check now writes and removes a temporary file in the nearest existing folder."""
    with pytest.raises(UsageError, match="--out_dir /proc/nope/out: cannot write in /proc"):
        cli.writable_dir("/proc/nope/out", "--out_dir")
    cli.writable_dir(str(tmp_path / "new" / "out"), "--out_dir")
    assert list(tmp_path.iterdir()) == []  # nothing created


@pytest.mark.slow
@pytest.mark.parametrize("repeat_ids", [False, True])
def test_resume_with_another_limit_never_duplicates_or_drops_rows_and_counts_the_file(tmp_path, capsys, repeat_ids):
    """`--resume --limit 10` on a 40-row output printed "0 new, 10 total" while the file kept 40 rows."""
    import json

    from conftest import BUILTIN_POLICY

    from grpo_mse.builtin.arithmetic import make_rows

    oracle = oracle_command
    rows = make_rows(6, seed=3)
    if repeat_ids:  # a table whose ids repeat: rows are keyed by position
        rows = [{**row, "id": 7} for row in rows]
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["--model", BUILTIN_POLICY, "--dataset", str(data), "--device", "cpu", "--n_oracle", "2"]
    common += ["--max_new_tokens", "2", "--out_dir", str(tmp_path / "o")]

    def run(*extra):
        oracle.main(common + list(extra))
        (path,) = (tmp_path / "o").glob("*.jsonl")
        lines = path.read_text().splitlines()
        return capsys.readouterr().out, [json.loads(line)["prompt"] for line in lines]

    out, prompts = run("--limit", "4")
    assert "examples: 4 new, 4 in the output file" in out and len(prompts) == 4
    out, prompts = run("--resume", "--limit", "2")  # shrinking: nothing new, nothing removed, the file's count
    assert "examples: 0 new, 4 in the output file" in out and "more than the 2 that --limit selects" in out
    assert prompts == [r["prompt"] for r in rows[:4]]
    out, prompts = run("--resume", "--limit", "6")  # growing: the two missing rows, once each
    assert "examples: 2 new, 6 in the output file" in out and prompts == [r["prompt"] for r in rows]


def test_resume_takes_one_model_folder_named_two_ways_as_one(tmp_path, monkeypatch):
    """`./assets/x` and its absolute path were refused on resume as "settings differ: model"."""
    from grpo_mse.tables.resume import differences

    monkeypatch.chdir(ROOT)
    keys = ["model", "model_fingerprint", "T"]
    saved = {"model": "./assets/tiny_policy", "model_fingerprint": "sha256:1", "T": 4}
    assert differences(saved, {**saved, "model": str(ROOT / "assets" / "tiny_policy")}, keys) == []
    unrecorded = {"model": "./assets/tiny_policy", "T": 4}  # no fingerprints: the same real path
    assert differences(unrecorded, {**unrecorded, "model": str(ROOT / "assets" / "tiny_policy")}, keys) == []
    other = {**saved, "model": "assets/train_policy", "model_fingerprint": "sha256:2"}
    assert [d.split(" ")[0] for d in differences(saved, other, keys)] == ["model", "model_fingerprint"]


def test_intervals_of_quantities_at_least_zero_are_clipped_and_flagged_at_small_T():
    """`--T 6 --M 2` printed a ratio interval with a negative lower bound and an ||E s||^2 interval entirely below 0
    (unbiased estimates of quantities >= 0 can be negative with few prompts)."""
    from grpo_mse.analysis import bootstrap, paired

    def at_least_zero(summary: dict) -> dict:
        return bootstrap.at_least_zero(bootstrap.Summary.from_json(summary)).to_json()

    assert at_least_zero({"estimate": 1.2, "ci95": [-0.4, 3.0]}) == {
        "estimate": 1.2,
        "ci95": [0.0, 3.0],
        "clipped": True,
    }
    below = at_least_zero({"estimate": -0.5, "ci95": [-0.9, -0.1]})
    assert below["ci95"] == [0.0, 0.0] and below["clipped"] and below["unreliable"] == bootstrap.UNRELIABLE
    assert at_least_zero({"estimate": 0.5, "ci95": [0.1, 0.9]}) == {"estimate": 0.5, "ci95": [0.1, 0.9]}
    assert at_least_zero({"estimate": None, "ci95": None}) == {"estimate": None, "ci95": None}
    # through the run's statistics: six prompts whose per-prompt ||E s||^2 estimates are mostly negative
    values = [-0.5, -0.2, -0.4, 0.1, -0.3, -0.6]
    records = {
        k: [
            simulated_prompt(k, i, {"grpo": 2.0 + i, "oracleV": 1.0 + i}, mean_score_sq=v) for i, v in enumerate(values)
        ]
        for k in (2, 4)
    }
    out = paired.run_statistics(records, [2, 4], ["grpo", "oracleV"], n_boot=200).paired.to_json()
    for summary in out["mean_score_sq"]:
        assert summary["estimate"] < 0 and summary["unreliable"] and summary["ci95"][0] == 0.0
    assert all(s["ci95"][0] >= 0 for series in out["ratio"].values() for s in series)
    assert "(unreliable: below 0)" in paired.describe(out)


def test_figure4_refuses_a_negative_half_width_and_clips_the_ratio_band(tmp_path):
    """make_figures.py with a negative interval bound in a JSON gave a matplotlib traceback; a ratio band of
    -10,000 to 55,000 set the axis."""
    import json

    from grpo_mse.figures.comparisons import ratio_band

    figures = make_figures_command
    run = {"K_list": [2, 4], "conditional_on_x": {"grpo": [1.0, 0.5], "oracleV": [0.9, 0.5]}, "config": {}}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**run, "ci95": {"grpo": [-0.1, 0.1], "oracleV": [0.1, 0.1]}}))
    with pytest.raises(UsageError, match="ci95 of grpo holds the half-width -0.1, below 0"):
        figures.main(["--tracecov", str(bad), "--out_dir", str(tmp_path / "f")])
    assert not (tmp_path / "f").exists()
    wide = {"estimate": 1.1, "ci95": [-10000.0, 55000.0]}
    assert ratio_band({"paired": {"ratio": {"grpo/oracleV": [wide, wide]}}}) == ([0.0, 0.0], [55000.0, 55000.0])


def test_figure4_draws_an_unbounded_ratio_interval_to_the_top_of_the_axis(tmp_path):
    """A tiny real-LLM run saves a GRPO/oracle interval whose upper end is infinite as null (strict JSON);
    make_figures.py failed on it with a TypeError. The band now reaches the top of the axis, the figure is written."""
    import json

    from grpo_mse.figures.comparisons import ratio_band

    open_ended = {"estimate": 1.39, "ci95": [1.25, None]}
    bounded = {"estimate": 0.16, "ci95": [None, 0.34]}
    paired = {"ratio": {"grpo/oracleV": [bounded, open_ended]}}
    assert ratio_band({"paired": paired}) == ([0.0, 1.25], [0.34, float("inf")])
    run = {"K_list": [2, 4], "conditional_on_x": {"grpo": [0.2, 1.4], "oracleV": [1.2, 1.0]}, "config": {}}
    path = tmp_path / "tracecov_run.json"
    path.write_text(json.dumps({**run, "paired": paired}))
    make_figures_command.main(["--tracecov", str(path), "--out_dir", str(tmp_path / "f")])
    assert any(name.endswith(".png") for name in os.listdir(tmp_path / "f"))
