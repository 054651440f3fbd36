"""compute_score returns within a bounded wall-clock time from any thread, even on adversarial answers."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import load_script

from grpo_mse.rewards.boxed_math import math_verify_equal
from grpo_mse.rewards.worker_pool import WorkerPool

ADVERSARIAL = [
    r"\boxed{9^{9^{9^{9}}}}",  # power tower: sympy computes a huge integer holding the GIL
    r"\boxed{(10^{10^{10}})!}",  # huge factorial
    r"\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    r"\boxed{" + "(" * 400 + "1" + ")" * 400 + "}",  # deep nesting
    r"\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
    r"\boxed{" + "x+" * 400_000 + "1}",  # ~1 MB answer
    "7" * 1_000_000,  # ~1 MB number (GSM8K / arithmetic rules)
]
TIMEOUT = 1.0
STARTUP = 20.0  # a new worker imports math-verify and sympy: allowed once per call at most


def _in_thread(fn, bound):
    """Run ``fn`` in a worker thread; fail if it does not finish within ``bound`` seconds."""
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=fn()), daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"still running after {bound} s"
    return box["result"], time.monotonic() - start


@pytest.fixture()
def reward(monkeypatch):
    monkeypatch.setenv("GRPO_REWARD_TIMEOUT", str(TIMEOUT))
    return load_script("Policy_Optimization/reward.py").compute_score


@pytest.mark.slow
def test_adversarial_math_answers_score_zero_within_the_bound(reward):
    assert _in_thread(lambda: reward("math", r"\boxed{\frac{1}{2}}", "0.5"), STARTUP)[0] == 1.0  # warm-up
    for answer in ADVERSARIAL:
        score, seconds = _in_thread(lambda a=answer: reward("math", a, "3"), TIMEOUT + STARTUP)
        assert score == 0.0
        assert seconds < TIMEOUT + STARTUP, (answer[:40], seconds)
    # the pool survived the killed workers: a normal answer still scores, and fast
    score, seconds = _in_thread(lambda: reward("math", r"\boxed{2\sqrt{3}}", r"\sqrt{12}"), STARTUP)
    assert score == 1.0


@pytest.mark.parametrize("source", ["arithmetic_zero_shot", "openai/gsm8k"])
def test_fast_rules_stay_in_process_and_bounded(reward, source):
    for answer in ADVERSARIAL:
        score, seconds = _in_thread(lambda a=answer: reward(source, a, "3"), 2.0)
        assert score == 0.0 and seconds < 2.0


def test_pool_kills_only_the_overrunning_worker():
    pool = WorkerPool(max_workers=2, preload=("math_verify",))
    slow = (r"9^{9^{9^{9}}}", "3")
    results = {}
    calls = {"slow": (slow, 1.0), "fast": (("1/2", "0.5"), 30.0)}
    threads = [
        threading.Thread(target=lambda k=k, a=a, t=t: results.__setitem__(k, pool.call(math_verify_equal, a, t, "x")))
        for k, (a, t) in calls.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {"slow": "x", "fast": True}
    assert pool.timeouts == 1
    assert pool.call(math_verify_equal, ("x^2+1", "1+x^2"), 30.0) is True
