"""The group-size advisor of a saved policy, measured: the oracle run then the trace-of-covariance run with its
advisor. The one door from training (adaptive K) into the runs: a policy folder and prompt rows in, the
advisor's JSON out (``paired.run_statistics``' ``group_size_advisor``)."""

from __future__ import annotations

import os

from grpo_mse.config.gradient_evaluation import OracleConfig, TracecovConfig
from grpo_mse.gradients.estimators import GRPO_STD, UNBIASED
from grpo_mse.runs.oracle import run_oracle
from grpo_mse.runs.tracecov import run_tracecov
from grpo_mse.tables.outputs import to_json


def measure_advice(
    policy: str,
    rows: list[dict],
    work_dir: str,
    *,
    k_list: list[int],
    budget: int,
    M: int,
    n_oracle: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    estimator: str,
) -> dict:
    """The advisor of the policy folder ``policy`` on every row of ``rows`` (CPU, fp32): V(x) from ``n_oracle``
    samples, then M groups per K in ``k_list`` with every prompt in one c1 batch, sampling at ``temperature`` and
    top-p 1; ``estimator`` grpo_std also measures its budgeted error at each K. The prompt table and the runs'
    files go under ``work_dir``."""
    table = os.path.join(work_dir, "prompts.jsonl")
    with open(table, "w") as f:
        for i, row in enumerate(rows):
            f.write(to_json({"id": i, **row}) + "\n")
    common = {
        "model": policy,
        "device": "cpu",
        "dtype": "fp32",
        "seed": seed,
        "temperature": temperature,
        "top_p": 1.0,
        "max_new_tokens": max_new_tokens,
    }
    oracle = run_oracle(
        OracleConfig(**common, dataset=table, n_oracle=n_oracle, batch_size=256, out_dir=os.path.join(work_dir, "v"))
    )
    outcome = run_tracecov(
        TracecovConfig(
            **common,
            oracle_table=oracle.path,
            T=len(rows),
            M=M,
            K_list=list(k_list),
            gen_bs=256,
            c1_batch=len(rows),
            save_json=os.path.join(work_dir, "tracecov"),
            skip_plot=True,
            budget=budget,
            allowed_K=list(k_list),
            estimators=[*UNBIASED, GRPO_STD] if estimator == GRPO_STD else list(UNBIASED),
            advisor_estimator=estimator,
        )
    )
    return outcome.result["group_size_advisor"]
