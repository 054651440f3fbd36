"""scripts/compare_baseline.py: the Assumption-2 table from explain_baseline summaries."""

import pytest

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


def test_explain_baseline_splits_each_score_norm_by_token_position():
    """--per_position: each token's own score s_t = grad log pi(y_t | x, y_<t), computed here directly from the
    model's logits, has the squared norm the script saves; ||s||^2 is the same as one backward pass's; lengths,
    EOS and rewards are the samples'; by_length's means are those of its samples."""
    import json
    import os

    import numpy as np
    import torch
    from conftest import BUILTIN_POLICY, ROOT, load_script

    from grpo_mse.policy.loading import eos_token_ids, load_policy
    from grpo_mse.policy.logprobs import PromptSampler
    from grpo_mse.policy.sampling import SamplingSettings

    script = load_script("scripts/explain_baseline.py")
    model, tokenizer = load_policy(BUILTIN_POLICY, "cpu", "fp32")
    settings = SamplingSettings(tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, 1.0, 0.95, 32)
    sampler = PromptSampler(model, tokenizer, settings, 256, 0)
    with open(os.path.join(ROOT, "data", "arithmetic_zero_shot.jsonl"), encoding="utf-8") as handle:
        row = json.loads(handle.readline())
    split = script.score_norms(sampler, row, 7, 4, per_position=True)
    whole = script.score_norms(sampler, row, 7, 4)
    ids, continuations, _ = sampler.draw(row, (-1, 7), 4)
    params = [p for p in model.parameters() if p.requires_grad]
    for sample, plain, tokens in zip(split, whole, continuations):
        assert (sample.length, sample.eos, sample.reward) == (len(tokens), tokens[-1] in settings.eos_ids, plain.reward)
        assert sample.norm2 == pytest.approx(plain.norm2, rel=1e-5)
        logits = model(torch.tensor([ids + tokens])).logits[0, len(ids) - 1 : -1]
        token_logp = torch.log_softmax(logits.float(), -1)[torch.arange(len(tokens)), torch.tensor(tokens)]
        for t, saved in enumerate(sample.position_norm2):
            grads = torch.autograd.grad(token_logp[t], params, retain_graph=True)
            assert saved == pytest.approx(sum(float((g.double() ** 2).sum()) for g in grads), rel=1e-4, abs=1e-6)
        assert sample.cross == pytest.approx(sample.norm2 - sum(sample.position_norm2))
    (entry,) = [e for e in script.by_length(split) if e["length"] == split[0].length]
    same = [s for s in split if s.length == split[0].length]
    assert entry["n"] == len(same) and entry["mean_norm2"] == pytest.approx(np.mean([s.norm2 for s in same]))
