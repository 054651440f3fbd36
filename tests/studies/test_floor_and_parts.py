"""scripts/bench_floor.py counts the model's matrix work from its config; scripts/tracecov_parts.py splits a
real run's time into parts that add up to its wall time, and reports the run's traces."""

import json
import os

import pytest
import torch
from conftest import BUILTIN_POLICY, load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_linear_shapes_count_every_linear_weight_of_the_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    bench_floor = load_script("scripts/bench_floor.py")
    config = LlamaConfig(
        vocab_size=50,
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    shapes = bench_floor.linear_shapes(config)
    counted = sum(fan_in * fan_out * count for fan_in, fan_out, count in shapes.values())
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert counted == linear  # the vocabulary head counted once although its weight is tied to the embedding
    assert shapes["k_v"] == (24, 12, 6)


@pytest.mark.slow
def test_tracecov_parts_add_up_to_the_wall_time(builtin_policy, tmp_path):
    parts = load_script("scripts/tracecov_parts.py")
    table = os.path.join(ROOT, "results", "demo", "oracle_v_n256_tiny_policy_20261201_225502.jsonl")
    out = tmp_path / "parts.json"
    argv = ["--model", BUILTIN_POLICY, "--oracle_table", table, "--T", "2", "--M", "2", "--K_list", "2"]
    parts.main([*argv, "--out", str(out)])
    run = json.loads(out.read_text())["runs"]["this"]
    assert all(run[p] > 0 for p in parts.PARTS) and run["other"] > 0
    assert sum(run["shares"].values()) == pytest.approx(1.0)
    assert set(run["traces"]) == {"naive", "grpo", "oracleV"} and len(run["traces"]["grpo"]) == 1
