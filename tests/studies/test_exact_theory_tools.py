"""scripts/exact_theory.py (exact oracle table + theory JSON), make_figures --theory and the estimator table."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import BUILTIN_POLICY, ROOT

from grpo_mse.commands import make_figures as make_figures_command
from grpo_mse.errors import UsageError
from grpo_mse.figures.comparisons import theory_overlay
from grpo_mse.figures.tracecov import draw_mse_panel, plt
from grpo_mse.gradients.estimators import ALL, UNBIASED
from grpo_mse.tables.inputs import load_rows
from studies.exact import estimator_table as table
from studies.exact import exact_theory as exact_theory_command
from studies.exact import one_token, theory

pytestmark = pytest.mark.slow  # model runs or whole command lines (see --durations)

ORACLE_FIELDS = {"id", "prompt", "ground_truth", "V_oracle", "n_oracle", "correct_count", "V_ci95_low", "V_ci95_high"}


@pytest.fixture(scope="module")
def exact_outputs(tmp_path_factory, builtin_policy):
    out = tmp_path_factory.mktemp("theory")
    exact_theory_command.main(
        [
            "--model",
            BUILTIN_POLICY,
            "--dataset",
            os.path.join(ROOT, "data", "arithmetic_zero_shot.jsonl"),
            "--T",
            "2",
            "--reachable_only",
            "--K_list",
            "2",
            "4",
            "--out_dir",
            str(out),
        ]
    )
    [oracle] = out.glob("oracle_exact_*.jsonl")
    [theory_json] = out.glob("theory_*.json")
    return oracle, json.loads(theory_json.read_text())


def test_oracle_table_is_run_tracecov_input(exact_outputs):
    oracle, result = exact_outputs
    rows = load_rows(str(oracle), required=("prompt", "ground_truth", "V_oracle"))  # what run_tracecov.py loads
    assert len(rows) == 2 and all(ORACLE_FIELDS <= set(r) for r in rows)
    for row, prompt in zip(rows, result["per_prompt"]):
        assert row["id"] == prompt["id"] and row["V_oracle"] == prompt["V"]
        assert row["V_ci95_low"] == row["V_ci95_high"] == row["V_oracle"] and 0 < row["V_oracle"] < 1
        assert 0 <= row["ground_truth"] <= 9  # --reachable_only: a one-token (digit) answer


def test_theory_json_is_consistent(exact_outputs):
    _, result = exact_outputs
    assert result["K_list"] == [2, 4] and result["n_prompts"] == 2
    for name in ALL:
        for q in one_token.QUANTITIES:
            np.testing.assert_allclose(result[q][name], np.mean([p[q][name] for p in result["per_prompt"]], 0))
        np.testing.assert_allclose(result["mse"][name], np.add(result["trace_cov"][name], result["bias2"][name]))
    for i, k in enumerate(result["K_list"]):  # the oracle's closed form sigma_O^2 / K, per prompt
        for p in result["per_prompt"]:
            assert p["mse"]["oracleV"][i] == pytest.approx(p["sigma_o2"] / k, rel=1e-9)
    c = result["scaling_constants"]
    expect = theory.scaling_constants(
        result["g_gram"], [p["sigma_o2"] for p in result["per_prompt"]], [p["var_zeta2"] for p in result["per_prompt"]]
    )
    assert c == pytest.approx(expect.to_json()) and c["c1"] > 0
    assert c["K_star_paper"] == pytest.approx(np.sqrt(c["c3"] / c["c1"]))
    assert result["config"]["matching_run_flags"] == {
        "max_new_tokens": 1,
        "top_p": 1.0,
        "temperature": 1.0,
        "score_distribution": "model",
    }


def test_exact_theory_errors(tmp_path, builtin_policy):
    script = exact_theory_command
    with pytest.raises(SystemExit) as stop:  # a bound of the flag: argparse's one line, exit 2
        script.main(["--dataset", "x.jsonl", "--T", "0"])
    assert stop.value.code == 2
    with pytest.raises(UsageError, match="--T must be >= 1"):  # the same check for a library caller
        script.ExactTheoryConfig(dataset="x.jsonl", T=0)
    with pytest.raises(UsageError, match="--K_list must be >= 2"):
        script.ExactTheoryConfig(dataset="x.jsonl", K_list=[4, 1])
    table_path = tmp_path / "rows.jsonl"
    table_path.write_text(json.dumps({"id": 0, "prompt": "2 * 60 =", "ground_truth": 120}) + "\n")
    with pytest.raises(UsageError, match="no row has a ground truth that a single token can produce"):
        script.main(
            [
                "--model",
                BUILTIN_POLICY,
                "--dataset",
                str(table_path),
                "--reachable_only",
                "--out_dir",
                str(tmp_path / "out"),
            ]
        )
    with pytest.raises(UsageError, match="logit Jacobian needs"):
        script.main(
            [
                "--model",
                BUILTIN_POLICY,
                "--dataset",
                str(table_path),
                "--max_jacobian_gb",
                "0.01",
                "--out_dir",
                str(tmp_path / "out"),
            ]
        )
    assert not (tmp_path / "out").exists()


def test_batch_c1_target_is_the_mean_unbiased_spread():
    rng = np.random.default_rng(3)
    grads = rng.normal(size=(7, 5))
    expect = np.mean([((b - b.mean(0)) ** 2).sum() / (len(b) - 1) for b in (grads[:3], grads[3:6])])  # grads[6:] alone
    assert one_token.batch_c1_target(theory.gradient_gram(grads), 3) == pytest.approx(expect, rel=1e-12)


def _synthetic(k_list=(2, 4)):
    """A theory JSON of two prompts and Monte Carlo per-prompt values equal to exact + (+-1) noise."""
    prompts = []
    for pid, scale in ((5, 1.0), (9, 3.0)):
        curve = {n: [scale * 100 / k for k in k_list] for n in ALL}
        bias = {n: [0.0 if n in UNBIASED else scale / k for k in k_list] for n in ALL}
        prompts.append(
            {
                "id": pid,
                "V": 0.5,
                "sigma_o2": scale * 100,
                "var_zeta2": scale * 10,
                "trace_cov": curve,
                "bias2": bias,
                "mse": {n: list(np.add(curve[n], bias[n])) for n in ALL},
            }
        )
    result = {
        "K_list": list(k_list),
        "per_prompt": prompts,
        "g_gram": [[4.0, 0.0], [0.0, 1.0]],
        "config": {"matching_run_flags": {"max_new_tokens": 1, "top_p": 1.0, "temperature": 1.0}},
        **one_token.mean_curves(prompts, ALL).to_json(),
    }
    result["scaling_constants"] = one_token.constants(prompts, result["g_gram"]).to_json()
    mc = {
        (k, n, str(p["id"])): {
            "trace": p["trace_cov"][n][i] + sign,
            "bias2": p["bias2"][n][i],
            "mse": p["mse"][n][i] + sign,
        }
        for i, k in enumerate(k_list)
        for n in ALL
        for p, sign in zip(prompts, (1.0, -1.0))
    }
    return result, mc


def test_estimator_table_rows_and_markdown():
    result, mc = _synthetic()
    rows = table.comparison_rows(result, mc, ALL)
    assert len(rows) == 2 * len(ALL) and set(table.COLUMNS) == set(rows[0])
    first = rows[0]  # K = 2, vanilla: exact mean (50 + 150) / 2; MC differs by +1 and -1, so the paired mean is 0
    assert first["exact_trace_cov"] == pytest.approx(100.0) and first["mc_trace_cov"] == pytest.approx(100.0)
    assert first["z_trace_cov"] == pytest.approx(0.0) and np.isnan(first["z_bias2"])
    drgrpo = next(r for r in rows if r["K"] == 4 and r["estimator"] == "drgrpo")
    assert drgrpo["exact_bias2"] == pytest.approx(0.5) and drgrpo["z_bias2"] == 0.0
    run = {
        "config": {"c1_batch": 2},
        "group_size_advisor": {
            "pooled": {"c1": 5.0, "c2": 200.0, "c3": 40.0, "K_star_paper": 2.8, "K_star_exact": 3.8},
            "per_K": {},
            "ci95": {
                "c1": [2.0, 3.0],
                "c2": [150.0, 250.0],
                "c3": [10.0, 30.0],
                "K_star_paper": [3.5, 4.5],
                "K_star_exact": [3.5, 4.5],
            },
        },
    }
    check = table.advisor_check(result, run)
    assert check.exact["c1_fixed_prompts"] == pytest.approx(2.5)  # g = (2, 0), (0, 1): 2 x 1.25 / (2 - 1)
    assert check.exact["K_star_paper_fixed_prompts"] == pytest.approx(4.0)  # sqrt(c3 / 2.5), c3 = 2 x mean(10, 30)
    assert check.exact["K_star_exact_fixed_prompts"] == pytest.approx(5.0)  # 1 + sqrt(c3 / 2.5)
    assert check.exact_inside_ci95 == {
        "c1": True,
        "c2": True,
        "c3": False,
        "K_star_paper": True,
        "K_star_exact": False,
    }
    text = table.markdown(rows, check)
    assert text.count("\n| 2 | ") == len(ALL) and "| c3 | 40 | 40 | 40 | [10, 30] |" in text


def test_make_figures_overlays_theory(tmp_path, capsys):
    result, _ = _synthetic()
    result["config"]["model_fingerprint"] = "sha256:abc"
    theory_path = tmp_path / "theory.json"
    theory_path.write_text(json.dumps(result))
    run = {
        "K_list": [2, 4],
        "conditional_on_x": {"grpo": [210.0, 99.0], "oracleV": [190.0, 101.0]},
        "ci95": {"grpo": [20.0, 10.0], "oracleV": [20.0, 10.0]},
        "config": {
            "model": "m",
            "model_fingerprint": "sha256:abc",
            "max_new_tokens": 32,
            "top_p": 0.95,
            "temperature": 1.0,
        },
    }
    run_path = tmp_path / "run.json"
    run_path.write_text(json.dumps(run))
    overlay = theory_overlay(result, run["conditional_on_x"])
    assert overlay == {"K": [2, 4], "grpo": result["trace_cov"]["grpo"], "oracleV": result["trace_cov"]["oracleV"]}
    fig, ax = plt.subplots()
    draw_mse_panel(ax, run, theory=overlay)
    assert sum(line.get_linestyle() == "--" for line in ax.get_lines()) == 2
    plt.close(fig)
    make_figures = make_figures_command
    make_figures.main(
        ["--tracecov", str(run_path), "--theory", str(theory_path), "--out_dir", str(tmp_path), "--name", "overlay"]
    )
    assert (tmp_path / "overlay.png").exists() and (tmp_path / "overlay.pdf").exists()
    assert "the exact curves assume other settings: max_new_tokens=32 (theory: 1)" in capsys.readouterr().err
    with pytest.raises(UsageError, match="not a theory JSON"):
        make_figures.main(["--tracecov", str(run_path), "--theory", str(run_path), "--out_dir", str(tmp_path)])


def test_make_figures_refuses_another_models_theory(tmp_path):
    """Issue 25 case 5: the tiny policy's exact curves were drawn as "train_policy (exact)". The theory's model
    fingerprint (recorded, or computed from its recorded local folder for older theory files) must be the run's."""
    from grpo_mse.policy.model_source import model_fingerprint

    result, _ = _synthetic()
    result["config"]["model"] = "assets/tiny_policy"  # an older theory file: no fingerprint, a local folder
    theory_path = tmp_path / "theory.json"
    theory_path.write_text(json.dumps(result))
    run = {
        "K_list": [2, 4],
        "conditional_on_x": {"grpo": [210.0, 99.0], "oracleV": [190.0, 101.0]},
        "config": {"model": "assets/train_policy", "max_new_tokens": 1, "top_p": 1.0, "temperature": 1.0},
    }
    run["config"]["model_fingerprint"] = model_fingerprint(os.path.join(ROOT, "assets", "train_policy"))
    run_path = tmp_path / "run.json"
    run_path.write_text(json.dumps(run))
    argv = [
        "plots/make_figures.py",
        "--tracecov",
        str(run_path),
        "--theory",
        str(theory_path),
        "--out_dir",
        str(tmp_path / "f"),
    ]
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "was computed for another model (assets/tiny_policy" in done.stderr and not (tmp_path / "f").exists()
    run["config"]["model_fingerprint"] = model_fingerprint(os.path.join(ROOT, "assets", "tiny_policy"))
    run_path.write_text(json.dumps(run))
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # the same model: drawn
    result["config"]["model"] = "elsewhere/not_here/model"
    theory_path.write_text(json.dumps(result))
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "cannot tell whether it was computed for the model" in done.stderr
