"""GSM8K through every command at tiny size (issue 56 item 3), as a new user chains them from a fresh clone with
the data package installed: the table (scripts/real_data.py) -> calculate_oracle_v.py on a seeded sample (its
continuation lengths printed) -> run_tracecov.py -> make_figures.py, and the VERL parquet (prepare_data.py) ->
grpo_train.sh with TRL for one step -> the VERL launcher's printed command. The built-in tiny policy never solves
GSM8K (V = 0): this checks that the paths run on the real rows, not what they measure (docs/real_data.md has the
journey with its numbers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "assets" / "tiny_policy"
KEEP = {"PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV"}

pytestmark = pytest.mark.slow


def run(args, tmp_path, env=None, timeout=600) -> str:
    base = {k: v for k, v in os.environ.items() if k in KEEP} | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        args, env=base | (env or {}), cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result.stdout + result.stderr


def test_gsm8k_table_oracle_tracecov_figures(gsm8k_test_file, tmp_path):
    table = tmp_path / "gsm8k_test.jsonl"
    assert "gsm8k test: 1319 rows" in run(
        [sys.executable, "scripts/real_data.py", "gsm8k", "--out", str(table)], tmp_path
    )
    tiny = ["--model", str(POLICY), "--device", "cpu", "--dtype", "fp32", "--max_new_tokens", "16"]
    oracle = run(
        [sys.executable, "Gradient_evaluation/calculate_oracle_v.py", *tiny, "--dataset", str(table), "--sample", "3"]
        + ["--n_oracle", "4", "--out_dir", str(tmp_path / "oracle")],
        tmp_path,
    )
    assert "examples: 3 new" in oracle and "continuation lengths (tokens): median" in oracle
    assert "reached --max_new_tokens 16 without ending" in oracle
    (oracle_table,) = (tmp_path / "oracle").glob("oracle_v_*.jsonl")
    out = tmp_path / "tracecov"
    run(
        [sys.executable, "Gradient_evaluation/run_tracecov.py", *tiny, "--oracle_table", str(oracle_table)]
        + ["--T", "2", "--M", "2", "--K_list", "2", "--skip_plot", "--save_json", str(out), "--max_memory_gb", "3"],
        tmp_path,
    )
    (main_json,) = [p for p in out.glob("tracecov_*.json") if not p.name.endswith("_detailed.json")]
    figures = run(
        [sys.executable, "plots/make_figures.py", "--tracecov", str(main_json), "--advisor", str(main_json)]
        + ["--out_dir", str(tmp_path / "figures")],
        tmp_path,
    )
    assert "figure4.png" in figures and (tmp_path / "figures" / "group_size_advisor.png").is_file()


def test_gsm8k_parquet_trl_step_and_verl_command(gsm8k_test_file, tmp_path):
    data = tmp_path / "gsm8k"
    prepared = run(
        [sys.executable, "Policy_Optimization/prepare_data.py", "--source", "gsm8k", "--limit", "16"]
        + ["--out_dir", str(data)],
        tmp_path,
    )
    assert "train: 16 rows" in prepared and "test: 16 rows" in prepared
    settings = {
        "MODEL": str(POLICY),
        "DATA_DIR": str(data),
        "BASE": str(tmp_path / "base"),
        "PYTHON_BIN": sys.executable,
        "GROUP_SIZE": "2",
        "BUDGET": "16",
        "MAX_PROMPT_LENGTH": "768",  # the tiny policy's tokenizer spells GSM8K's longest test prompts in 725 tokens
        "MAX_RESPONSE_LENGTH": "8",
        "WANDB_MODE": "disabled",
        "SAVE_MODEL": "0",
    }
    trained = run(
        ["bash", "Policy_Optimization/grpo_train.sh", "--max_steps", "1"], tmp_path, settings | {"TRAINER": "trl"}
    )
    assert "val-core/openai/gsm8k/acc/mean@1" in trained and "reason=completed steps=1" in trained
    verl = run(
        ["bash", "Policy_Optimization/grpo_train.sh"],
        tmp_path,
        settings | {"TRAINER": "verl", "DRY_RUN": "print", "GROUP_SIZE": "4", "BUDGET": "1024"},
    )
    assert f"data.train_files=\\'{data}/train.parquet\\'" in verl and "actor_rollout_ref.rollout.n=4" in verl
