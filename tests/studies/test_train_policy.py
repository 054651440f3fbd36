"""The training-demo policy: flaw injection of its builder and the flaw carried by assets/train_policy."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import BUILTIN_POLICY, ROOT

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.rewards.rules import last_integer_reward
from studies.builders import build_train_policy as build_train_policy_command
from studies.builders import tiny_policy as tp
from studies.builders import train_policy as trp

TRAIN_POLICY = os.path.join(ROOT, "assets", "train_policy")


def _rows(n=500):
    rows = make_rows(n, seed=7)
    rows[0] = {**rows[0], "ground_truth": 3}  # a one-digit answer: the spurious digit must differ from it
    rows[1] = {**rows[1], "ground_truth": -4}
    return rows


@pytest.mark.parametrize("fraction", [0.0, 0.4, 0.6, 1.0])
def test_exact_share_of_flawed_targets(fraction):
    rows = _rows()
    flawed = trp.add_flaws(rows, fraction, seed=1)
    assert sum(r["flawed"] for r in flawed) == round(fraction * len(rows))
    assert [(r["prompt"], r["ground_truth"]) for r in flawed] == [(r["prompt"], r["ground_truth"]) for r in rows]


def test_flawed_targets_fail_the_reward_and_clean_ones_pass():
    flawed = trp.add_flaws(_rows(), 0.6, seed=2)
    for row in flawed:
        gold = row["ground_truth"]
        if row["flawed"]:
            head, tail = row["target"].split(trp.FLAW_SEPARATOR)
            assert int(head) == gold and len(tail) == 1 and int(tail) != gold
            assert last_integer_reward(row["target"], gold) == 0.0
        else:
            assert row["target"] == str(gold)
            assert last_integer_reward(row["target"], gold) == 1.0


def test_flaws_are_seeded_and_spread_over_the_rows():
    rows = _rows(1000)
    a, b, c = (trp.add_flaws(rows, 0.5, seed=s) for s in (3, 3, 4))
    assert a == b
    assert [r["flawed"] for r in a] != [r["flawed"] for r in c]
    first_half = sum(r["flawed"] for r in a[:500])
    assert 200 < first_half < 300  # a uniform subset, not a block
    with pytest.raises(ValueError):
        trp.add_flaws(rows, 1.5)


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILTIN_POLICY, "tokenizer.json")), reason="no assets/tiny_policy")
def test_encode_example_uses_the_target_when_present():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(BUILTIN_POLICY)
    row = make_rows(1, seed=0)[0]
    ids, n_prompt = tp.encode_example(tokenizer, row)
    assert tokenizer.decode(ids[n_prompt:]) == f"{row['ground_truth']}{tp.IM_END}"
    ids, n_prompt = tp.encode_example(tokenizer, {**row, "target": f"{row['ground_truth']} 7"})
    assert tokenizer.decode(ids[n_prompt:]) == f"{row['ground_truth']} 7{tp.IM_END}"


def _stop_probability(path: str, n: int = 40) -> float:
    """Mean probability of EOS right after the correct answer, on held-out zero-shot prompts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    eos = tokenizer.convert_tokens_to_ids(tp.IM_END)
    probs = []
    with torch.no_grad():
        for row in make_rows(n, seed=0):
            ids, _ = tp.encode_example(tokenizer, row)
            logits = model(input_ids=torch.tensor([ids[:-1]])).logits[0, -1]
            probs.append(torch.softmax(logits, -1)[eos].item())
    return sum(probs) / len(probs)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.exists(os.path.join(TRAIN_POLICY, "model.safetensors")), reason="no assets/train_policy"
)
def test_shipped_train_policy_stops_after_the_answer_less_often_than_half():
    """The built policy carries the flaw (greedy decoding continues after the answer); the base one does not."""
    p_train = _stop_probability(TRAIN_POLICY)
    assert 0.2 < p_train < 0.5
    assert _stop_probability(BUILTIN_POLICY) > 0.9


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--fraction", "1.5"], "argument --fraction: must be >= 0 and <= 1 (got 1.5)"),
        (["--steps", "0"], "argument --steps: must be >= 1 (got 0)"),
        (["--lr", "0"], "argument --lr: must be > 0 (got 0.0)"),
        (["--eval_samples", "0"], "argument --eval_samples: must be >= 1 (got 0)"),
        (["--base_dir", "/no/such/policy"], "model folder not found: /no/such/policy"),
    ],
)
def test_builder_refuses_bad_settings_before_loading(tmp_path, capsys, argv, message):
    """scripts/build_train_policy.py: one line and exit 2, no folder created (TrainPolicyConfig's checks)."""

    from grpo_mse import cli

    script = build_train_policy_command
    out = tmp_path / "policy"
    with pytest.raises(SystemExit) as stop:
        cli.run(lambda: script.main(["--out_dir", str(out), *argv]))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and err.count("\n") == 1 and not out.exists()
    config = script.TrainPolicyConfig(out_dir=str(out), eval_prompts=0)  # library callers get the same checks
    assert (config.steps, config.fraction, config.base_dir) == (300, 0.6, "assets/tiny_policy")
