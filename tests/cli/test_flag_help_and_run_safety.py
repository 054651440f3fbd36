"""The behaviour behind the refusals, without a command line: every flag's help, Ctrl-C, JSON without NaN,
concurrent runs, resume, torn lines, seeded rows, repeated K and estimators, the sweep and the collector."""

import json

import pytest
from conftest import BUILTIN_POLICY
from refusal_cases import WANDB_ROW

from grpo_mse.commands import sweep_group_size as sweep_group_size_command
from grpo_mse.commands import tracecov as tracecov_command

# Behaviour behind the refusals (no command line needed).

ENTRY_POINTS = [
    "Gradient_evaluation/run_tracecov.py",
    "Gradient_evaluation/calculate_oracle_v.py",
    "plots/make_figures.py",
    "scripts/make_arithmetic_data.py",
    "scripts/explain_baseline.py",
    "scripts/exact_theory.py",
    "scripts/estimator_table.py",
    "scripts/simulate_algorithm1.py",
    "scripts/build_tiny_policy.py",
    "scripts/bench_engines.py",
    "Policy_Optimization/prepare_data.py",
    "Policy_Optimization/collect_runs.py",
    "Policy_Optimization/sweep_group_size.py",
]


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_every_flag_has_help_with_its_default(script, monkeypatch):
    from conftest import load_script

    from grpo_mse import cli

    class Parsed(Exception):
        pass

    def capture(self, argv=None, namespace=None):
        raise Parsed(self)

    monkeypatch.setattr(cli.ArgumentParser, "parse_args", capture)
    module = load_script(script)
    with pytest.raises(Parsed) as parsed:
        getattr(module, "parse_args", None) and module.parse_args([]) or module.main([])
    parser = parsed.value.args[0]
    assert parser.formatter_class is cli.HelpFormatter
    undocumented = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert not undocumented


def test_ctrl_c_is_one_line_with_the_resume_hint(capsys):
    from grpo_mse import cli

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as done:
        cli.run(interrupted, resume_hint="rerun the same command with --resume to continue")
    assert done.value.code == 130
    assert capsys.readouterr().err == "error: interrupted; rerun the same command with --resume to continue\n"


def test_json_has_null_not_nan(tmp_path):
    from grpo_mse.tables.outputs import append_jsonl, mean_ci, write_json

    write_json(tmp_path / "a.json", {"single_prompt": mean_ci([2.0]), "inf": [float("inf")]})
    text = (tmp_path / "a.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"single_prompt": {"mean": 2.0, "sd": None, "ci95": None, "n": 1}, "inf": [None]}
    append_jsonl(tmp_path / "b.jsonl", {"x": float("nan")})
    assert (tmp_path / "b.jsonl").read_text() == '{"x": null}\n'


def test_concurrent_runs_get_their_own_names_and_locks(tmp_path):
    from grpo_mse.errors import UsageError
    from grpo_mse.tables.resume import claim, lock

    stem = str(tmp_path / "tracecov_m_20260101_000000")
    first, second = claim(stem, ".progress.rank0.jsonl"), claim(stem, ".progress.rank0.jsonl")
    assert (first, second) == (stem, stem + "_2")
    held = lock(first + ".progress.rank0.jsonl")
    with pytest.raises(UsageError, match="another process is writing"):
        lock(first + ".progress.rank0.jsonl")
    held.close()
    lock(first + ".progress.rank0.jsonl").close()


def test_resume_picks_the_run_with_equal_settings():
    from grpo_mse.errors import UsageError
    from grpo_mse.tables.resume import choose

    runs = [("a", {"seed": 0, "T": 2}), ("b", {"seed": 1, "T": 2})]
    assert choose(runs, {"seed": 0, "T": 2}, ("seed", "T")) == "a"
    assert choose([], {"seed": 0}, ("seed",)) is None
    with pytest.raises(UsageError, match=r"cannot --resume b: settings differ: seed \(saved 1, now 2\)"):
        choose(runs, {"seed": 2, "T": 2}, ("seed", "T"))


def test_torn_last_line_is_cut_and_a_corrupt_line_refused(tmp_path):
    from grpo_mse.errors import DataError
    from grpo_mse.tables.outputs import read_complete_jsonl

    log = tmp_path / "p.jsonl"
    log.write_text('{"a": 1}\n{"a": 2')
    assert read_complete_jsonl(str(log)) == [{"a": 1}] and log.read_text() == '{"a": 1}\n'
    log.write_text('{"a": 1}\n[]\n{"a": 3}\n')
    with pytest.raises(DataError, match="line 2 is corrupt"):
        read_complete_jsonl(str(log))
    assert log.read_text() == '{"a": 1}\n[]\n{"a": 3}\n'


def test_rows_are_a_seeded_shuffle_then_the_first_t():
    import random

    from grpo_mse.tables.inputs import selection

    order = list(range(10))
    random.Random(3).shuffle(order)
    assert selection(10, 4, seed=3) == order[:4]
    assert selection(10, 10, seed=3) == selection(10, 50, seed=3) == list(range(10))
    assert sorted(selection(10, 4, seed=3, subsample=6)) != selection(10, 4, seed=3, subsample=6)  # shuffled


def test_duplicate_k_and_estimators_are_run_once(capsys):

    args = tracecov_command.parse_args(
        [
            "--oracle_table",
            "t.jsonl",
            "--save_json",
            "out",
            "--skip_plot",
            "--device",
            "cpu",
            "--model",
            BUILTIN_POLICY,
            "--K_list",
            "4",
            "2",
            "4",
            "--estimators",
            "grpo",
            "grpo",
            "naive",
        ]
    )
    assert args.K_list == [4, 2] and args.estimators == ["grpo", "naive"]
    assert "note: --K_list lists a value twice; using 4 2" in capsys.readouterr().err


def test_sweep_deduplicates_and_reads_dry_run(monkeypatch):

    sweep = sweep_group_size_command
    monkeypatch.setenv("DRY_RUN", "false")
    args = sweep.parse_args(["--K_list", "4", "4", "--seeds", "0", "0"])
    assert (args.K_list, args.seeds, args.dry_run) == ([4], [0], False)
    monkeypatch.setenv("DRY_RUN", "1")
    assert sweep.parse_args([]).dry_run


def test_collector_skips_a_torn_line_and_merges_one_run_logged_twice(tmp_path):
    from grpo_mse.training.logs import collect

    history = tmp_path / "grpo_K8_seed1" / "files" / "wandb-history.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text(WANDB_ROW + WANDB_ROW.replace('"_step": 1', '"_step": 2')[:-9])
    config = "actor_rollout_ref:\n  value:\n    rollout:\n      n: 8\ndata:\n  value:\n    seed: 1\n"
    (history.parent / "config.yaml").write_text(config)
    settings = "[grpo_train] settings: TRAINER=verl GROUP_SIZE=8 SEED=1 BUDGET=1024 LR=1e-6\n"
    (tmp_path / "grpo_K8_seed1.log").write_text(settings + "step:1 - val-core/x/acc/mean@1:0.5\n")
    with pytest.warns(UserWarning, match="skipping unreadable line 2"):
        frame = collect([str(tmp_path)])
    assert frame[["K", "seed", "step", "value"]].values.tolist() == [[8, 1, 1, 0.5]]
