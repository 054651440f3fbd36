"""scripts/reward_audit.py: its samples are the oracle's own (same streams), the label set holds every text a rule
rewards or that mentions the gold, blind to the verdicts, and the counts of false positives and negatives match a
hand count on constructed labels."""

import json

import pytest
from conftest import BUILTIN_POLICY, ROOT

from grpo_mse.commands import oracle as oracle_command
from studies.audits import reward_audit as reward_audit_command

AUDIT = reward_audit_command
DATA = f"{ROOT}/data/arithmetic_zero_shot.jsonl"


def sample(id_, j, text, gold, **rules):
    record = {"id": id_, "j": j, "problem": "p", "gold": gold, "text": text, "ended": True}
    return {**record, **{name: int(rule(text, gold)) for name, rule in AUDIT.RULES.items()}}


@pytest.mark.slow
def test_the_audit_draws_the_oracles_samples(tmp_path):
    oracle = oracle_command
    common = ["--model", BUILTIN_POLICY, "--dataset", DATA, "--seed", "3", "--max_new_tokens", "6"]
    oracle.main(
        [*common, "--device", "cpu", "--dtype", "fp32", "--n_oracle", "8", "--limit", "5", "--out_dir"]
        + [str(tmp_path / "oracle")]
    )
    AUDIT.main(["sample", *common, "--limit", "5", "--n", "8", "--batch_size", "5", "--out", str(tmp_path / "s.jsonl")])
    (table,) = (tmp_path / "oracle").glob("*.jsonl")
    counts = [json.loads(line)["correct_count"] for line in table.read_text().splitlines()]
    samples = AUDIT.read_jsonl(str(tmp_path / "s.jsonl"))
    assert [sum(s["last_integer"] for s in samples if s["id"] == i) for i in range(5)] == counts
    assert [(s["id"], s["j"]) for s in samples] == [(i, j) for i in range(5) for j in range(8)]


def test_select_keeps_every_rewarded_and_gold_mentioning_text_blind_and_shuffled():
    samples = [
        sample(0, 0, "17", 17),  # both rules reward
        sample(0, 1, "17 is it, or not", 17),  # the last integer rule rewards it, the final-answer rule does not
        sample(0, 2, "it could be 17 + 1", 17),  # mentions gold, neither rule rewards
        *[sample(1, j, "no idea", 5) for j in range(10)],  # the rest
    ]
    chosen = AUDIT.select(samples, others=3, seed=0)
    keys = {(c["id"], c["j"]) for c in chosen}
    assert {(0, 0), (0, 1), (0, 2)} <= keys and len(keys) == 6
    assert all(set(c) == {"id", "j", "problem", "gold", "text"} for c in chosen)  # no verdicts shown


def test_counts_against_constructed_labels():
    samples = [
        sample(0, 0, "17", 17),  # both reward; label 1: TP for both
        sample(0, 1, "The value of 17...", 17),  # last integer rewards, final does not; label 0: FP of last only
        sample(0, 2, "17 + 0 = 17 and so on", 17),  # last rewards (17 last), final not; label 1: FN of final
        sample(0, 3, "it is 18", 17),  # neither, no gold: rest; sampled and labelled 0
        sample(0, 4, "nope", 17),  # rest, not labelled
    ]
    labels = [{"id": 0, "j": j, "label": label} for j, label in ((0, 1), (1, 0), (2, 1), (3, 0))]
    summary = AUDIT.count(samples, labels)
    assert summary["strata"] == {"rewarded": 3, "mentions_gold": 0, "rest": 2}
    last, final = summary["rules"]["last_integer"], summary["rules"]["final_answer"]
    assert (last["tp"], last["fp"], last["fn"], last["tn"]) == (2, 1, 0, 0)
    assert (final["tp"], final["fp"], final["fn"], final["tn"]) == (1, 0, 1, 1)
    assert summary["rest_sample"]["labelled"] == 1 and summary["rest_sample"]["positive"] == 0
    with pytest.raises(Exception, match="have no label"):
        AUDIT.count(samples, labels[1:])
