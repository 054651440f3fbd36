"""scripts/compare_baseline.py: the Assumption-2 table from explain_baseline summaries."""

from studies.audits import compare_baseline as compare_baseline_command

script = compare_baseline_command


def _prompt(total, correct):
    return {"E_norm2": total, "E_norm2_given_correct": correct}


def test_row_means_medians_and_prompts_without_a_correct_sample():
    diagnostic = {
        "per_prompt": [_prompt(100.0, 50.0), _prompt(40.0, 10.0), _prompt(60.0, None), _prompt(30.0, 60.0)],
        "oracle_helps_on": 2,
        "prompts": 4,
        "mean_K_times_vanilla_minus_oracle": -3.25,
    }
    row = script.summary_row("p", diagnostic)
    # correct-answer columns over the 3 prompts with a correct sample: mean (50+10+60)/3, median of 0.5, 0.25, 2
    assert row == ["p", "2 / 4", "40.0", "57.5", "0.50", "-3.2"]


def test_table_has_one_row_per_policy(tmp_path, capsys):
    import json

    paths = []
    for name, helps in (("a", 1), ("b", 3)):
        path = tmp_path / f"{name}.json"
        summary = {"per_prompt": [_prompt(10.0, 5.0)], "oracle_helps_on": helps, "prompts": 4}
        path.write_text(json.dumps({**summary, "mean_K_times_vanilla_minus_oracle": 1.0}))
        paths.append(str(path))
    out = tmp_path / "t.md"
    script.main(["--diagnostics", *paths, "--labels", "A", "B", "--out", str(out)])
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and lines[2].startswith("| A | 1 / 4") and lines[3].startswith("| B | 3 / 4")


def test_explain_baseline_gap_has_a_prompt_bootstrap_interval(tmp_path):
    """A real run through the command line on the built-in policy: each prompt's gap within the bounds the identity
    allows (G in {0, 1}, so 0 <= E[G |s|^2] <= E|s|^2), and the mean gap with a prompt-bootstrap interval holding it."""
    import glob
    import json
    import os
    import subprocess
    import sys

    from conftest import ROOT

    (table,) = glob.glob(os.path.join(ROOT, "results", "demo", "oracle_v_n256_tiny_policy_*.jsonl"))
    out = tmp_path / "diagnostic.json"
    command = [sys.executable, "scripts/explain_baseline.py", "--oracle_table", table, "--prompts", "3", "--n", "8"]
    done = subprocess.run([*command, "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(out.read_text())
    gaps = [row["K_times_vanilla_minus_oracle"] for row in summary["per_prompt"]]
    for row, gap in zip(summary["per_prompt"], gaps):
        value, total = row["V_oracle"], row["E_norm2"]
        assert -(value**2) * total - 1e-6 <= gap <= value * (2 - value) * total + 1e-6
    assert abs(summary["mean_K_times_vanilla_minus_oracle"] - sum(gaps) / len(gaps)) < 1e-9
    low, high = summary["mean_K_times_vanilla_minus_oracle_ci95"]
    assert low <= summary["mean_K_times_vanilla_minus_oracle"] <= high
    assert "95% prompt-bootstrap interval" in done.stdout
