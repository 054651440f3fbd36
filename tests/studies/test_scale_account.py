"""studies.audits.scale_account (scripts/scale_account.py): the scale account's arithmetic on inputs built with
known answers: norms exactly proportional to length, an oracle prediction computed by hand, the paper's gap."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from studies.audits.scale_account import account, norms_by_length

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sample(length, reward, per_token=100.0, cross=0.0):
    positions = [per_token] * length
    return {
        "length": length,
        "eos": True,
        "reward": reward,
        "norm2": per_token * length + cross,
        "position_norm2": positions,
        "cross": cross,
    }


def test_norms_proportional_to_length_fit_their_slope_and_cross_share():
    samples = [sample(2, 1), sample(2, 0), sample(4, 0, cross=40.0), sample(3, 1)]
    norms = norms_by_length(samples)
    assert [e["length"] for e in norms["by_length"]] == [2, 3, 4]
    assert norms["by_length"][2]["mean_norm2"] == 440.0 and norms["by_length"][0]["mean_token_norm2"] == 100.0
    n, x, y = [2, 1, 1], [2, 3, 4], [200.0, 300.0, 440.0]
    assert norms["norm2_per_token_fit"] == pytest.approx(
        sum(a * b * c for a, b, c in zip(n, x, y)) / sum(a * b * b for a, b in zip(n, x))
    )
    assert norms["cross_share"] == pytest.approx(40.0 / (200 + 200 + 440 + 300))


def write_run(tmp_path, prompts):
    """A run's main JSON and per-prompt CSV: prompts = [(id, V, length, {K: oracle mse})]."""
    base = tmp_path / "tracecov_x_20260101_000000"
    rows = []
    for index, (pid, value, length, by_k) in enumerate(prompts):
        for k, mse in by_k.items():
            for name in ("naive", "grpo", "oracleV"):
                rows.append(
                    {
                        "prompt_index": index,
                        "id": pid,
                        "K": k,
                        "estimator": name,
                        "trace": mse,
                        "bias2": 0,
                        "mse": mse if name == "oracleV" else 2 * mse,
                        "V_oracle": value,
                        "mean_reward": value,
                        "mean_new_tokens": length,
                        "share_eos": 1.0,
                        "share_cut": 0.0,
                        "prompt_hash": "h",
                    }
                )
    with open(f"{base}_per_prompt.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / f"{base.name}.json").write_text("{}")
    return f"{base}.json"


def test_the_oracle_prediction_and_the_papers_gap(tmp_path):
    run = write_run(tmp_path, [(0, 0.5, 3.0, {4: 100.0, 8: 50.0}), (1, 0.2, 5.0, {4: 300.0, 8: 150.0})])
    diagnostic = {
        "per_prompt": [{"id": 1, "E_oracle_term": 1000.0}, {"id": 7, "E_oracle_term": 9.0}],
        "per_sample": [sample(3, 1), sample(5, 0)],
    }
    (tmp_path / "d.json").write_text(json.dumps(diagnostic))
    paper = tmp_path / "paper.csv"
    paper.write_text("model,K,estimator,mse\nInstruct,4,oracle,4000\nInstruct,8,vanilla,1\n")
    result = account(run, str(tmp_path / "d.json"), str(paper), "Instruct")
    assert result["lengths"]["mean_new_tokens"] == 4.0
    at4, at8 = result["oracle_prediction"]
    assert (at4["prompts_in_both"], at4["predicted_mean"], at4["measured_mean"]) == (1, 250.0, 300.0)
    assert at8["predicted_mean"] == 125.0 and at4["run_measured_mean_all"] == 200.0
    (gap,) = result["paper_gap"]  # only K = 4 has the paper's oracle value
    mean_vv = (0.25 + 0.16) / 2
    assert gap["paper_over_ours"] == pytest.approx(20.0) and gap["v_mix_at_most"] == pytest.approx(0.25 / mean_vv)
    assert gap["length_to_close_it"] == pytest.approx(20.0 / (0.25 / mean_vv) * 4.0)


def test_the_command_line_writes_the_account(tmp_path):
    run = write_run(tmp_path, [(0, 0.5, 3.0, {4: 100.0})])
    (tmp_path / "d.json").write_text(
        json.dumps({"per_prompt": [{"id": 0, "E_oracle_term": 400.0}], "per_sample": [sample(3, 1)]})
    )
    out = tmp_path / "account.json"
    done = subprocess.run(
        [
            sys.executable,
            "scripts/scale_account.py",
            "--run",
            run,
            "--diagnostic",
            str(tmp_path / "d.json"),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "oracle MSE predicted 100, measured 100" in done.stdout and json.loads(out.read_text())["paper_gap"]
