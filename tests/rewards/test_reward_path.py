"""One reward path and one schema: gradient evaluation scores rows by data_source and reads VERL parquet rows."""

import json
from types import SimpleNamespace

import pytest
import torch

from grpo_mse.builtin.arithmetic import make_rows
from grpo_mse.config.gradient_evaluation import TracecovConfig
from grpo_mse.policy.logprobs import PromptSampler
from grpo_mse.policy.sampling import SamplingSettings
from grpo_mse.rewards.rules import DEFAULT_SOURCE, last_integer_reward, row_reward
from grpo_mse.runs.tracecov import TracecovRun
from grpo_mse.tables.inputs import load_rows, row_keys
from grpo_mse.training.data import arithmetic_splits, write_splits


def _answers(gold) -> list[str]:
    gold = int(gold)
    return [str(gold), f"it is {gold + 1}", f"{gold} or {gold - 1}", "no idea", f"= {gold}."]


def test_rows_without_data_source_use_the_last_integer_rule():
    assert DEFAULT_SOURCE == "arithmetic"
    for row in make_rows(20, seed=1):
        assert "data_source" not in row
        for text in _answers(row["ground_truth"]) + ["x" * 3 + str(row["ground_truth"]) + "\\boxed{1}"]:
            assert row_reward(row, text) == last_integer_reward(text, row["ground_truth"])
    # a non-numeric gold under the default rule scores 0 (training's unknown-source fallback would pick MATH)
    assert row_reward({"ground_truth": "\\frac{1}{2}"}, "\\boxed{\\frac{1}{2}}") == 0.0


def test_verl_parquet_loads_and_scores_like_the_jsonl(tmp_path):
    """prepare_data's test split is the built-in data: its parquet rows give the same prompts, ids and rewards."""
    jsonl_rows = make_rows(12, seed=3, style="few_shot")
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in jsonl_rows))
    splits = arithmetic_splits(n_train=4, n_test=12, seed=3, style="few_shot")
    parquet = write_splits(splits, str(tmp_path))["test"]
    from_jsonl, from_parquet = load_rows(str(jsonl)), load_rows(parquet)
    assert row_keys(from_parquet) == row_keys(from_jsonl) == [r["id"] for r in jsonl_rows]
    for plain, verl in zip(from_jsonl, from_parquet):
        assert verl["prompt"] == plain["prompt"] and verl["data_source"] == "arithmetic_few_shot"
        assert verl["ground_truth"] == str(plain["ground_truth"])  # lifted from reward_model.ground_truth
        for text in _answers(plain["ground_truth"]):
            assert row_reward(verl, text) == row_reward(plain, text)
        assert sum(row_reward(verl, text) for text in _answers(plain["ground_truth"])) == 2


def test_top_level_fields_win_over_verl_fields(tmp_path):
    row = {"prompt": "p", "ground_truth": 5, "id": 7, "reward_model": {"ground_truth": "6"}, "extra_info": {"id": 8}}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (loaded,) = load_rows(str(path))
    assert loaded["ground_truth"] == 5 and loaded["id"] == 7


class FixedTextSampler(PromptSampler):
    """A sampler whose continuations are fixed tokens and whose decoded texts are given."""

    def __init__(self, model, texts):
        settings = SamplingSettings(eos_ids=(1,), pad_id=0, temperature=1.0, top_p=1.0, max_new_tokens=2)
        super().__init__(model, SimpleNamespace(pad_token_id=0), settings, gen_bs=8, seed=0)
        self.texts = texts

    def draw(self, row, stream, count):
        assert count == len(self.texts)
        return [2, 3], [[4 + (i % 5), 5] for i in range(count)], self.texts


@pytest.mark.parametrize(
    "row, reward",
    [
        ({"data_source": "openai/gsm8k", "ground_truth": "42"}, 1.0),  # the number after '####'
        ({"ground_truth": 42}, 0.0),  # no data_source: the last integer (7)
    ],
)
def test_tracecov_reward_follows_the_data_source(random_lm, row, reward):
    texts = ["so #### 42 and 7"] * 4
    config = TracecovConfig(
        oracle_table="rows", save_json="unused", skip_plot=True, M=2, K_list=[2], estimators=["naive"], engine="fast"
    )
    run = TracecovRun(config, FixedTextSampler(random_lm, texts), [{**row, "prompt": "p", "V_oracle": 0.5}], [0])
    record, _ = run.evaluate_prompt(0, k=2)
    assert record.mean_reward == reward
    assert torch.isfinite(torch.tensor(record.tr_cov["naive"]))
