"""The group-size advisor's c1, c2, c3 against their exact values on an enumerable case (one generated token).

Four real zero-shot prompts of the built-in policy whose answer is one token (a digit) and 0.05 < V < 0.95, each
copied COPIES times under different ids (independent samples), and arranged so that every c1 batch of
``--c1_batch 4`` consecutive rows holds the four prompts once. The run is exactly run_tracecov.py's:
TracecovRun.run_batch (evaluate_prompt + BetweenPromptBatch) per batch and K, then advisor.advise.

Exact targets, prompts held fixed (studies.exact.theory / one_token):
- c2 = mean sigma_O^2, c3 = 2 mean tr Var zeta_2 (theory.scaling_constants; copies weigh the prompts equally);
- c1: a batch's c1 is unbiased for sum_i ||g_i - mean g||^2 / (n - 1) over its n prompts, which is n / (n - 1)
  times theory.scaling_constants' c1 (1/n) of the four prompts (one_token.batch_c1_target).
"""

import math
import os

import numpy as np
import pytest
import torch
from conftest import module_scope, one_token_sampler

from grpo_mse.analysis.advisor import advise
from grpo_mse.analysis.bootstrap import read_calibration
from grpo_mse.analysis.error_model import per_prompt_constants
from grpo_mse.builtin.arithmetic import make_rows
from studies.exact import one_token, theory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLICY = os.path.join(ROOT, "assets", "tiny_policy")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists(os.path.join(POLICY, "model.safetensors")),
        reason="assets/tiny_policy/model.safetensors not built (built-in policy missing)",
    ),
]

PROMPTS, COPIES, M, K_LIST = 4, 8, 32, (2, 4)
# z-tests below use the standard error of the Monte Carlo error alone (prompts fixed), over 64 per-row values for
# c2, c3 and 16 independent batch values for c1. The per-row traces are skewed (a sample covariance of 32 groups),
# so the tolerance is |z| < 4 rather than 1.96: P(|t_15| > 4) = 0.1% for normal data, and skewness at most
# doubles the tail here. The same z then rejects the three plausible bugs in test_z_tests_have_power.
Z = 4.0


def _choose_rows(model, tokenizer, texts):
    """The first PROMPTS zero-shot rows with a one-token answer and 0.05 < V < 0.95, with their enumerations."""
    chosen = []
    for row in make_rows(100, seed=0, style="zero_shot"):
        if not one_token.reachable(texts, row["ground_truth"]):
            continue
        enum = one_token.enumerate_row(model, tokenizer, row, texts, temperature=1.0)
        value = enum.moments().V
        if 0.05 < value < 0.95:
            chosen.append(({**row, "V_oracle": value}, enum))
        if len(chosen) == PROMPTS:
            return chosen
    raise AssertionError(f"fewer than {PROMPTS} zero-shot prompts with a non-degenerate one-token V")


def _run_advisor(model, tokenizer, rows, progress):
    """run_tracecov's advisor path: run_batch over c1 batches of PROMPTS consecutive rows per K, then advise."""
    from grpo_mse.config.gradient_evaluation import TracecovConfig
    from grpo_mse.distributed import rank_batches
    from grpo_mse.runs.advisor_hook import AdvisorHook
    from grpo_mse.runs.tracecov import TracecovRun

    sampler = one_token_sampler(model, tokenizer)
    config = TracecovConfig(
        oracle_table="rows", save_json="unused", skip_plot=True, M=M, estimators=["grpo", "oracleV"], engine="fast"
    )
    keys = [row["id"] for row in rows]
    layout = rank_batches(len(rows), PROMPTS, 1)[0]
    run = TracecovRun(config, sampler, rows, keys, progress=progress, advisor=AdvisorHook(config, layout))
    for k in K_LIST:
        for batch_id, indices in enumerate(layout):
            run.run_batch(batch_id, indices, k)
    done, batches = run.done, run.advisor.batches
    records = {k: [r for (rk, _), r in done.items() if rk == k] for k in K_LIST}
    batch_records = {k: [b for (bk, _), b in batches.items() if bk == k] for k in K_LIST}
    return records, batch_records


@pytest.fixture(scope=module_scope)
def case(tmp_path_factory):
    from grpo_mse.policy.loading import load_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tokenizer = load_policy(POLICY, "cpu", "fp32")
        texts = one_token.token_texts(tokenizer, model.config.vocab_size)
        chosen = _choose_rows(model, tokenizer, texts)
        moments = [enum.moments() for _, enum in chosen]
        gram = theory.gradient_gram([enum.g for _, enum in chosen])
        exact = theory.scaling_constants(gram, [m.sigma_o2 for m in moments], [m.var_zeta2 for m in moments]).to_json()
        rows = [{**chosen[j % PROMPTS][0], "id": 1000 + j} for j in range(PROMPTS * COPIES)]
        row_gram = theory.gradient_gram([chosen[j % PROMPTS][1].g for j in range(len(rows))])
        records, batches = _run_advisor(
            model, tokenizer, rows, str(tmp_path_factory.mktemp("advisor") / "progress.jsonl")
        )
    finally:
        torch.set_num_threads(threads)
    c1_target = one_token.batch_c1_target(row_gram, PROMPTS)
    return {
        "exact": exact,
        "c1_target": c1_target,
        "records": records,
        "batches": batches,
        "advice": advise(records, batches, seed=0, calibration=read_calibration()).to_json(),
    }


def _stratified(records_by_k, value_fn) -> tuple[float, float]:
    """(mean, s.e.) of per-row values pooled over K, with strata (K, prompt) held fixed."""
    strata = {}
    for k, records in records_by_k.items():
        for r in records:
            strata.setdefault((k, str(r.prompt)), []).append(value_fn(r))
    n = sum(len(s) for s in strata.values())
    variance = sum(len(s) * np.var(s, ddof=1) for s in strata.values()) / n**2
    return float(np.mean([v for s in strata.values() for v in s])), math.sqrt(variance)


def _batches(batches_by_k, value_fn) -> tuple[float, float]:
    """(mean, sd / sqrt(n)) over the independent c1 batches of every K (all estimate one target)."""
    values = np.array([value_fn(b) for batches in batches_by_k.values() for b in batches])
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values)))


def _z(stats: tuple[float, float], target: float) -> float:
    """(mean - target) / s.e."""
    return (stats[0] - target) / stats[1]


def _c2(r):
    return per_prompt_constants(r)[0]


def _c3(r):
    return per_prompt_constants(r)[1]


def test_batch_target_is_the_unbiased_spread(case):
    """The fixed-prompt c1 target is n/(n-1) times scaling_constants' c1 (every batch holds the four prompts)."""
    assert case["c1_target"] == pytest.approx(case["exact"]["c1"] * PROMPTS / (PROMPTS - 1), rel=1e-9)
    assert case["c1_target"] > 0 and case["exact"]["c3"] > 0


def _constant_stats(case) -> dict[str, tuple[float, float]]:
    """(mean, s.e.): c1 over the c1 batches, c2 and c3 over the per-row values
    (error_model.per_prompt_constants)."""
    return {
        "c1": _batches(case["batches"], lambda b: b.c1),
        "c2": _stratified(case["records"], _c2),
        "c3": _stratified(case["records"], _c3),
    }


def test_advisor_constants_match_exact_values(case):
    """Per-row / per-batch constants and advise()'s pooled points agree with the exact values within Z s.e."""
    exact, pooled = case["exact"], case["advice"]["pooled"]
    targets = {"c1": case["c1_target"], "c2": exact["c2"], "c3": exact["c3"]}
    for name, (mean, se) in _constant_stats(case).items():
        assert abs(mean - targets[name]) < Z * se, f"{name}: {mean:.4g} +- {se:.3g} vs exact {targets[name]:.4g}"
        assert abs(pooled[name] - targets[name]) < Z * se, f"{name}: pooled {pooled[name]:.4g} vs {targets[name]:.4g}"


def test_bootstrap_intervals_contain_c2_c3(case):
    """c2, c3: the exact values lie in advise()'s bootstrap 95% intervals (32 rows per K, two K)."""
    for name in ("c2", "c3"):
        low, high = case["advice"]["ci95"][name]
        value = case["exact"][name]
        assert low <= value <= high, f"{name}: exact {value:.4g} outside [{low:.4g}, {high:.4g}]"


def test_bootstrap_intervals_contain_c1_and_k_star(case):
    """c1 and K*: the fixed-prompt exact values lie in advise()'s bootstrap 95% intervals."""
    ratio = math.sqrt(case["exact"]["c3"] / case["c1_target"])
    exact = {"c1": case["c1_target"], "K_star_paper": ratio, "K_star_exact": 1 + ratio}
    for name, target in exact.items():
        low, high = case["advice"]["ci95"][name]
        assert low <= target <= high, f"{name}: exact {target:.4g} outside [{low:.4g}, {high:.4g}]"


def test_z_tests_have_power(case):
    """The same z-tests reject plausible bugs: within-variance not divided by M in c1, K^2 for K(K-1) in c3, and
    the GRPO trace for the oracle trace in c2."""
    exact = case["exact"]
    unscaled = _z(_batches(case["batches"], lambda b: b.between - M * b.within), case["c1_target"])
    squared = _z(_stratified(case["records"], lambda r: _c3(r) * r.K / (r.K - 1)), exact["c3"])
    grpo_c2 = _z(_stratified(case["records"], lambda r: r.K * r.tr_cov["grpo"]), exact["c2"])
    assert min(abs(unscaled), abs(squared), abs(grpo_c2)) > Z, (unscaled, squared, grpo_c2)
