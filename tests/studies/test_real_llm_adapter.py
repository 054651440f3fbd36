"""The post-trained real LLM's builder: training and validation problems disjoint from every evaluation problem
(and from each other), both prompt styles, and (slow, on the installed SmolLM2) an adapter folder that names its
base machine-independently and loads through --model as the merged model."""

import dataclasses
import json
import os

import pytest

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.errors import ModelError
from studies.builders.real_llm import (
    ADAPTER_SEED,
    SMOLLM2_BASE,
    VALIDATION_SEED,
    disjoint_rows,
    evaluation_problems,
    problem_of,
)


def test_the_evaluation_problems_are_those_of_the_shipped_data():
    for style in ("zero_shot", "few_shot"):
        with open(f"data/arithmetic_{style}.jsonl", encoding="utf-8") as handle:
            shipped = {problem_of(json.loads(line)) for line in handle}
        assert shipped == evaluation_problems()
    assert problem_of(make_rows(1, seed=0, style="few_shot")[0]) == problem_of(make_rows(1, seed=0)[0])


def test_training_and_validation_problems_are_disjoint_from_evaluation_and_each_other():
    evaluation = evaluation_problems()
    train = disjoint_rows(600, ADAPTER_SEED, evaluation)
    problems = [problem_of(r) for r in train]
    assert len(train) == 1200 and problems[:600] == problems[600:]  # each problem in both styles
    assert len(set(problems[:600])) == 600 and not set(problems) & evaluation
    kinds = {p.count("*") + 2 * p.count("/") for p in problems}  # multiplication and division among them
    assert {1, 2} <= kinds
    assert "Problem: " in train[700]["prompt"][0]["content"] and "Problem: " not in train[0]["prompt"][0]["content"]
    validation = disjoint_rows(50, VALIDATION_SEED, evaluation | set(problems))
    assert not {problem_of(r) for r in validation} & (evaluation | set(problems))
    for row in train:
        assert eval(problem_of(row).rstrip("= "), {"__builtins__": {}}) == row["ground_truth"]


@pytest.mark.slow
def test_a_tiny_build_resumes_and_writes_an_adapter_that_loads_as_the_merged_model(tmp_path, monkeypatch):
    import torch

    from grpo_mse.policy.loading import load_policy
    from grpo_mse.policy.model_source import model_fingerprint
    from studies.builders.real_llm import AdapterRecipe, build_adapter, smollm2_gguf

    try:
        smollm2_gguf()
    except ModelError as error:
        pytest.skip(str(error))
    out = tmp_path / "lora"
    recipe = AdapterRecipe(
        steps=2, batch_size=2, rank=2, alpha=4, n_train=4, n_validation=2, eval_every=1, eval_samples=1, warmup=1
    )
    checkpoint = str(tmp_path / "ckpt" / "checkpoint.pt")
    record = build_adapter(str(out), recipe, checkpoint)
    straight = (out / "adapter_model.safetensors").read_bytes()

    # interrupted after step 1's checkpoint (at step 2's validation), then started again: the same weights
    from studies.builders import tiny_policy

    calls, real = [], tiny_policy.estimate_v

    def stop_at_the_third_validation(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(tiny_policy, "estimate_v", stop_at_the_third_validation)
    resumable = str(tmp_path / "ckpt" / "interrupted.pt")
    with pytest.raises(KeyboardInterrupt):
        build_adapter(str(tmp_path / "interrupted"), recipe, resumable)
    monkeypatch.setattr(tiny_policy, "estimate_v", real)
    assert torch.load(resumable, weights_only=False)["step"] == 1
    build_adapter(str(tmp_path / "interrupted"), recipe, resumable)
    assert (tmp_path / "interrupted" / "adapter_model.safetensors").read_bytes() == straight
    with pytest.raises(Exception, match="a build with other settings"):
        build_adapter(str(tmp_path / "other"), dataclasses.replace(recipe, lr=5e-4), checkpoint)
    with open(out / "adapter_config.json", encoding="utf-8") as handle:
        assert json.load(handle)["base_model_name_or_path"] == SMOLLM2_BASE
    assert [h["step"] for h in record["validation"]] == [0, 1, 2]
    model, tokenizer = load_policy(str(out))
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # the base's parameters, merged
    assert tokenizer.eos_token == "<|im_end|>"
    assert model_fingerprint(str(out)) != model_fingerprint(smollm2_gguf())
    assert os.path.getsize(out / "adapter_model.safetensors") < 10 * 2**20
