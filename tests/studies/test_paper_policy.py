"""The paper-regime policy: its builder's response format and the format carried by assets/paper_policy."""

from __future__ import annotations

import math
import os
import random
from collections import Counter

import pytest
import torch
from conftest import BUILTIN_POLICY, ROOT

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.rewards.rules import last_integer_reward
from studies.builders import build_paper_policy as build_paper_policy_command
from studies.builders import paper_policy as pp
from studies.builders import tiny_policy as tp

PAPER_POLICY = os.path.join(ROOT, "assets", "paper_policy")
needs_tiny = pytest.mark.skipif(
    not os.path.exists(os.path.join(BUILTIN_POLICY, "tokenizer.json")), reason="no assets/tiny_policy"
)
needs_paper = pytest.mark.skipif(
    not os.path.exists(os.path.join(PAPER_POLICY, "model.safetensors")), reason="no assets/paper_policy"
)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(BUILTIN_POLICY)


def test_responses_end_with_the_answer_and_pass_the_reward():
    rng = random.Random(3)
    for answer in (0, 7, -4, 42, -1188, 1188):
        text = pp.response(answer, rng)
        words, tail = text.split(pp.ANSWER_MARK)
        assert tail == f" {answer}" and last_integer_reward(text, answer) == 1.0
        assert last_integer_reward(text, answer + 1) == 0.0
        assert words.startswith(" ") and len(words.split()) == pp.LEAD_IN_WORDS
        assert set(words.split()) <= set(pp.WORDS)


def test_lead_in_words_are_uniform_and_independent():
    """Chi-square tests (16 - 1 and 16^2 - 1 degrees of freedom) on 20000 lead-ins: each slot uniform, pairs too."""
    rng = random.Random(0)
    texts = [pp.lead_in(rng).split() for _ in range(20000)]
    n_words = len(pp.WORDS)
    for slot in (0, pp.LEAD_IN_WORDS - 1):
        counts = Counter(t[slot] for t in texts)
        expected = len(texts) / n_words
        chi2 = sum((counts[w] - expected) ** 2 / expected for w in pp.WORDS)
        assert chi2 < 37.7  # 99.9% quantile of chi2(15)
    pairs = Counter((t[0], t[1]) for t in texts)
    expected = len(texts) / n_words**2
    chi2 = sum((pairs[(a, b)] - expected) ** 2 / expected for a in pp.WORDS for b in pp.WORDS)
    assert chi2 < 255 + 4.9 * math.sqrt(2 * 255)  # ~99.9% quantile of chi2(255)


def test_training_rows_are_the_demo_problems_with_fresh_lead_ins_per_copy():
    a, b, c = (pp.training_rows(20, 3, seed=s) for s in (1, 1, 2))
    assert a == b and [r["target"] for r in a] != [r["target"] for r in c]
    demo = make_rows(20, seed=0, style="zero_shot")
    assert [r["prompt"] for r in a] == [r["prompt"] for r in demo for _ in range(3)]
    assert all(last_integer_reward(r["target"], r["ground_truth"]) == 1.0 for r in a)
    copies = [{r["target"] for r in a[i : i + 3]} for i in range(0, 60, 3)]
    assert sum(len(t) == 3 for t in copies) >= 19  # 8 words from 16: two equal lead-ins have chance 16^-8


@needs_tiny
def test_answer_starts_at_a_fixed_token_offset(tokenizer):
    """Every lead-in is LEAD_IN_WORDS tokens, so the answer's first token sits at the same offset after the prompt."""
    pp.check_single_token_words(tokenizer)
    mark = tokenizer.convert_tokens_to_ids(pp.ANSWER_MARK)
    for row in pp.training_rows(300, seed=5):
        ids, n_prompt = tp.encode_example(tokenizer, row)
        response = ids[n_prompt:]
        assert response[pp.LEAD_IN_WORDS] == mark
        assert tokenizer.decode(response[pp.LEAD_IN_WORDS + 1 :]) == f" {row['ground_truth']}{tp.IM_END}"


@needs_tiny
def test_a_word_that_splits_is_refused(tokenizer, monkeypatch):
    monkeypatch.setattr(pp, "WORDS", (*pp.WORDS, "zebra"))
    with pytest.raises(ValueError, match="not single tokens of this tokenizer: zebra"):
        pp.check_single_token_words(tokenizer)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--steps", "0", "--slip_steps", "0", "--settle_steps", "0"],
            "--steps, --slip_steps and --settle_steps are all 0: nothing to build",
        ),
        (["--slip_steps", "-1"], "argument --slip_steps: must be >= 0 (got -1)"),
        (["--lr", "0"], "argument --lr: must be > 0 (got 0.0)"),
        (["--eval_samples", "0"], "argument --eval_samples: must be >= 1 (got 0)"),
        (["--base_dir", "/no/such/policy"], "model folder not found: /no/such/policy"),
    ],
)
def test_builder_refuses_bad_settings_before_loading(tmp_path, capsys, argv, message):
    """scripts/build_paper_policy.py: one line and exit 2, no folder created."""

    from grpo_mse import cli

    script = build_paper_policy_command
    out = tmp_path / "policy"
    with pytest.raises(SystemExit) as stop:
        cli.run(lambda: script.main(["--out_dir", str(out), *argv]))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and err.count("\n") == 1 and not out.exists()


@needs_tiny
@pytest.mark.slow
def test_build_is_seeded(tmp_path):
    """Two builds with the same seed (a few steps) give identical weights; another seed does not."""
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = tmp_path / name
        pp.build_and_save(
            out,
            base_dir=BUILTIN_POLICY,
            seed=seed,
            steps=3,
            slip_steps=2,
            settle_steps=2,
            problems=8,
            copies=2,
            batch_size=8,
        )
    a, b, c = (load_file(tmp_path / n / "model.safetensors") for n in "abc")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@needs_tiny
@pytest.mark.slow
def test_steps_s_reproduce_step_s_of_a_longer_build(tmp_path):
    """Constant learning rate after warmup: a build of s steps equals step s of a longer build (how the shipped
    step count was chosen from one run's V trajectory, docs/paper_regime.md)."""
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    seen = {}
    settings = {"base_dir": BUILTIN_POLICY, "problems": 8, "copies": 2, "batch_size": 8, "warmup": 2}
    settings |= {"slip_steps": 0, "settle_steps": 0}  # stage 1 alone

    def keep(step, model):
        seen[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}

    pp.build_and_save(tmp_path / "long", steps=6, log_every=4, callback=keep, **settings)
    pp.build_and_save(tmp_path / "short", steps=4, **settings)
    short = load_file(tmp_path / "short" / "model.safetensors")
    assert all(torch.equal(short[k], seen[4][k]) for k in short)
    long = load_file(tmp_path / "long" / "model.safetensors")
    assert not all(torch.equal(short[k], long[k]) for k in short)


def test_slip_plan_draws_solve_rates_uniformly_and_carry_slips():
    """500 problems: n_correct / COPIES ~ U(0.1, 0.9) (mean within 3 se of 0.5, each decile of the range used),
    slip = answer +- 10 with both signs, seeded, and a shorter plan is a prefix of a longer one."""
    plan = pp.slip_plan(500, seed=0)
    answers = [int(r["ground_truth"]) for r in make_rows(500, seed=0)]
    rates = [n / pp.COPIES for n, _ in plan]
    assert all(0.1 <= q <= 0.9 for q in rates) and abs(sum(rates) / 500 - 0.5) < 3 * (0.8 / math.sqrt(12 * 500))
    assert len({min(int((q - 0.1) / 0.08), 9) for q in rates}) == 10
    shifts = Counter(slip - a for (_, slip), a in zip(plan, answers))
    assert set(shifts) == set(pp.SLIP_SHIFTS) and min(shifts.values()) > 200
    assert pp.slip_plan(48, seed=0) == plan[:48] and pp.slip_plan(500, seed=0) == plan
    assert pp.slip_plan(500, seed=1) != plan


def test_slip_rows_hold_each_problem_s_share_of_correct_targets():
    rows, plan = pp.slip_rows(30, copies=10, seed=2), pp.slip_plan(30, copies=10, seed=2)
    assert len(rows) == 300
    for i, (n_correct, slip) in enumerate(plan):
        copies = rows[i * 10 : (i + 1) * 10]
        answer = copies[0]["ground_truth"]
        correct = sum(last_integer_reward(r["target"], answer) for r in copies)
        slipped = sum(last_integer_reward(r["target"], slip) for r in copies)
        assert (correct, slipped) == (n_correct, 10 - n_correct)
        assert all(len(r["target"].split(pp.ANSWER_MARK)[0].split()) == pp.LEAD_IN_WORDS for r in copies)


@needs_tiny
@pytest.mark.slow
def test_staged_build_equals_each_stage_on_the_last_one_s_saved_weights(tmp_path):
    """``build_and_save(steps=s, slip_steps=t, settle_steps=u)`` gives the weights of stage 1 saved, then
    ``steps=0, slip_steps=t`` from that folder, then ``settle_steps=u`` alone from that one (how the shipped
    policy was built from committed weights), and each stage changes the weights."""
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    settings = {"problems": 8, "copies": 4, "batch_size": 8, "warmup": 2}
    none = {"steps": 0, "slip_steps": 0, "settle_steps": 0}
    pp.build_and_save(tmp_path / "all", base_dir=BUILTIN_POLICY, steps=3, slip_steps=3, settle_steps=3, **settings)
    pp.build_and_save(tmp_path / "one", base_dir=BUILTIN_POLICY, **{**none, "steps": 3}, **settings)
    pp.build_and_save(tmp_path / "two", base_dir=tmp_path / "one", **{**none, "slip_steps": 3}, **settings)
    pp.build_and_save(tmp_path / "three", base_dir=tmp_path / "two", **{**none, "settle_steps": 3}, **settings)
    weights = {n: load_file(tmp_path / n / "model.safetensors") for n in ("all", "one", "two", "three")}
    assert all(torch.equal(weights["all"][k], weights["three"][k]) for k in weights["all"])
    for earlier, later in (("one", "two"), ("two", "three")):
        assert not all(torch.equal(weights[earlier][k], weights[later][k]) for k in weights["all"])
    with pytest.raises(ValueError, match="nothing to build"):
        pp.build_and_save(tmp_path / "none", base_dir=BUILTIN_POLICY, **none, **settings)


@pytest.fixture(scope="module")
def paper_policy():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(PAPER_POLICY).eval(), AutoTokenizer.from_pretrained(PAPER_POLICY)


@needs_paper
def test_shipped_policy_spreads_the_lead_in_over_the_words(paper_policy):
    """The first lead-in token's law is near uniform on WORDS (entropy > 0.9 log 16), with < 5% of mass elsewhere."""
    model, tokenizer = paper_policy
    word_ids = [tokenizer(f" {w}", add_special_tokens=False)["input_ids"][0] for w in pp.WORDS]
    for row in make_rows(8, seed=0):
        ids = tokenizer(
            tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
            return_tensors="pt",
        )["input_ids"]
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=ids).logits[0, -1].double(), -1)
        on_words = probs[word_ids]
        assert on_words.sum() > 0.95
        p = on_words / on_words.sum()
        assert -(p * p.log()).sum() > 0.9 * math.log(len(pp.WORDS))


@needs_paper
def test_shipped_policy_answers_in_the_trained_format(paper_policy):
    """Greedy responses: LEAD_IN_WORDS words of WORDS, ":", an integer, then EOS."""
    model, tokenizer = paper_policy
    rows = make_rows(6, seed=0)
    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, do_sample=False, max_new_tokens=pp.LEAD_IN_WORDS + 8)
    for seq in out[:, enc["input_ids"].shape[1] :].tolist():
        assert tokenizer.eos_token_id in seq
        words, answer = tokenizer.decode(seq, skip_special_tokens=True).split(pp.ANSWER_MARK)
        assert len(words.split()) == pp.LEAD_IN_WORDS and set(words.split()) <= set(pp.WORDS)
        int(answer)


@needs_paper
def test_shipped_policy_errs_by_its_slip(paper_policy):
    """The design's premise: on 8 demo prompts x 32 samples (temperature 1, top_p 0.95) at least 98% of answers
    are the correct or the slip answer, and both occur (the settled build gave 100% on 48 x 16)."""
    model, tokenizer = paper_policy
    rows = make_rows(8, seed=0)
    slips = [{**r, "ground_truth": slip} for r, (_, slip) in zip(rows, pp.slip_plan(8))]
    answers, _ = tp.sample_answers(model, tokenizer, rows, n_samples=32, seed=3)  # scored against both answers
    correct, slipped = tp.share_correct(rows, answers), tp.share_correct(slips, answers)
    assert sum(correct) + sum(slipped) >= 0.98 * 8 and sum(correct) > 1 and sum(slipped) > 1


@needs_paper
@pytest.mark.slow
def test_fast_engine_equals_reference_on_the_paper_policy(paper_policy):
    """Sampled groups of the shipped paper-regime policy (lead-in + answer, ~13 tokens): the fast engine (shared
    prompt, two backward passes) gives the reference's traces (one plain pass and backward per estimator)."""
    from grpo_mse.gradients import estimators as est
    from grpo_mse.gradients.engine import prompt_traces
    from grpo_mse.gradients.trace_engines import EngineSettings
    from grpo_mse.policy.loading import eos_token_ids
    from grpo_mse.policy.logprobs import PromptSampler
    from grpo_mse.policy.sampling import SamplingSettings
    from grpo_mse.rewards.rules import row_reward

    model, tokenizer = paper_policy
    settings = SamplingSettings(tuple(eos_token_ids(model, tokenizer)), tokenizer.pad_token_id, 1.0, 0.95, 24)
    fast_sampler, reference_sampler = (
        PromptSampler(model, tokenizer, settings, 64, 0, shared_prompt=shared) for shared in (True, False)
    )
    row = make_rows(3, seed=0)[2]
    ids, continuations, texts = fast_sampler.draw(row, (0, 0), 12)
    assert all(len(c) > pp.LEAD_IN_WORDS + 2 for c in continuations)  # the lead-in is in the scored sequences
    groups = [continuations[i : i + 4] for i in range(0, 12, 4)]
    rewards = torch.tensor([row_reward(row, t) for t in texts], dtype=torch.float64).reshape(3, 4)
    rewards[0] = torch.tensor([1.0, 0.0, 1.0, 0.0])  # mixed rewards in one group at least: every estimator moves
    params = [p for p in model.parameters() if p.requires_grad]
    fast = prompt_traces(fast_sampler.logprob_fn(ids), params, groups, rewards, 0.4, est.ALL, EngineSettings("fast"))
    reference = prompt_traces(
        reference_sampler.logprob_fn(ids), params, groups, rewards, 0.4, est.ALL, EngineSettings("reference")
    )
    assert fast.traces[est.VANILLA] > 0 and fast.traces[est.ORACLE] > 0
    for name in est.ALL:
        assert fast.traces[name] == pytest.approx(reference.traces[name], rel=1e-5, abs=1e-9)


def test_training_problems_are_the_shipped_zero_shot_data():
    """PROBLEMS rows of make_rows(seed=0) are data/arithmetic_zero_shot.jsonl, the file the demo measures."""
    import json

    with open(os.path.join(ROOT, "data", "arithmetic_zero_shot.jsonl"), encoding="utf-8") as handle:
        shipped = [json.loads(line) for line in handle]
    assert len(shipped) == pp.PROBLEMS
    assert [(r["prompt"], r["ground_truth"]) for r in shipped] == [
        (r["prompt"], r["ground_truth"]) for r in make_rows(pp.PROBLEMS, seed=0, style="zero_shot")
    ]
