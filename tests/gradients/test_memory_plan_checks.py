"""The memory plan's decisions at their boundaries and the lines it prints (grpo_mse.gradients.memory_plan): a run
fits when its essentials equal what is available, rows are kept when their statistics equal the budget, c1's batch is
in memory when all but its last vector fit; the plan line, the refusal and the peak line show bytes / 1e9 to three
digits (the expected numbers are worked out by hand below). The machine's memory is faked throughout."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from grpo_mse.errors import UsageError
from grpo_mse.gradients import allocator, memory, memory_plan
from grpo_mse.gradients.memory_plan import CAPPED, MemoryPlan, RunShape, RunSizes

# 1,235,000,001 bytes print as 1.24 GB (1.235000001 rounds up); a divisor off by one byte in 1e9 would print 1.23
ODD = 1_235_000_001


def available_for(budget: int) -> int:
    """The available bytes whose PLAN_MARGIN share is exactly ``budget`` bytes."""
    start = int(budget / memory_plan.PLAN_MARGIN) - 2
    found = [a for a in range(start, start + 6) if int(memory_plan.PLAN_MARGIN * a) == budget]
    assert found, budget
    return found[0]


def test_a_run_fits_when_its_essentials_equal_what_is_available():
    plan = MemoryPlan(held=5, essential=100, statistics=100, kept_rows=0, c1_in_memory=0, c1_bytes=0, available=100)
    assert plan.fits()
    assert not replace(plan, available=99).fits()


def test_the_plan_line_shows_each_part_in_gb_to_three_digits():
    plan = MemoryPlan(
        held=ODD, essential=1, statistics=2_345_000_001, kept_rows=3, c1_in_memory=2, c1_bytes=ODD,
        available=6_000_000_000,
    )  # fmt: skip
    # needed = held + statistics = 3.580000002 GB; held + available = 7.235000001 GB
    assert plan.line() == (
        "memory: about 3.58 GB needed, 7.24 GB available host memory (model and libraries 1.24, gradients and "
        "statistics 2.35 with 3 rows kept, c1 1.24 for 2 mean gradients in memory)"
    )
    likely = replace(plan, likely_statistics=1_000_000_000)  # needed: held + c1 = 2.470000002 GB; the most 3.58
    assert likely.line().endswith("in memory; at most 3.58 if every group's rewards differ)")
    assert "about 2.47 GB needed" in likely.line()


@pytest.mark.parametrize(
    ("kind", "remedy"), [("available host memory", "use a larger machine"), (CAPPED, "raise --max_memory_gb")]
)
def test_the_refusal_names_the_least_needed_what_there_is_and_the_remedy(kind, remedy):
    plan = MemoryPlan(
        held=ODD, essential=1_110_000_000, statistics=0, kept_rows=0, c1_in_memory=0, c1_bytes=0,
        available=1_000_000_000, kind=kind,
    )  # fmt: skip
    # held + essential = 2.345000001 GB; held + available = 2.235000001 GB
    assert memory_plan.refusal(plan) == (
        f"memory: about 2.35 GB needed at the least, 2.24 GB {kind} (model and libraries 1.24); too little memory: "
        f"lower --M, --K_list, --max_new_tokens, --estimators, --dtype bf16 or --no_advisor, or {remedy}"
    )


def test_the_peak_line_shows_the_measured_peak_beside_the_estimate(monkeypatch):
    monkeypatch.setattr(allocator, "process_peak", lambda: ODD)
    plan = MemoryPlan(held=ODD, essential=0, statistics=1_110_000_000, kept_rows=0, c1_in_memory=0, c1_bytes=0,
                      available=0)  # fmt: skip
    assert memory_plan.peak_line(None, "cpu") == "memory: peak 1.24 GB"
    assert memory_plan.peak_line(plan, "cpu") == "memory: peak 1.24 GB (estimated 2.35 GB)"
    asked = []

    def max_memory_allocated(device):
        asked.append(device)
        return 2_345_000_001

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", max_memory_allocated)
    monkeypatch.setattr(allocator, "process_peak", lambda: pytest.fail("a GPU run's peak is the device's"))
    assert memory_plan.peak_line(plan, "cuda:1") == "memory: peak 2.35 GB (estimated 2.35 GB)"
    assert asked == [torch.device("cuda:1")]


def test_memory_is_handed_back_only_above_the_plan_s_likely_peak(monkeypatch):
    plan = MemoryPlan(held=100, essential=0, statistics=50, kept_rows=0, c1_in_memory=0, c1_bytes=0, available=0)
    calls = []
    monkeypatch.setattr(allocator, "return_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(allocator, "process_resident", lambda: plan.needed)
    assert not memory_plan.hold_to_plan(plan, "cpu") and calls == []
    monkeypatch.setattr(allocator, "process_resident", lambda: plan.needed + 1)
    assert memory_plan.hold_to_plan(plan, "cpu") and calls == [1]


# A prompt of 2 passes of 2 rows; rows of 100 bytes, statistics of 10 (one label): keeping k < 4 rows takes
# 10 + max(100 k + 220, 100 (k + 2)) bytes (backward: 2 rows + the largest tensor's 10 twice), so 230 for none,
# 330 for one, 430 for two; all four together take max(2 * 100 + 220, 400) = 420
KEPT = RunShape(row=100, vector=10, largest=10, labels=1, rows_per_pass=2, rows_per_prompt=4, activations=0,
                c1_vectors=0, c1_reads=0)  # fmt: skip


@pytest.mark.parametrize(
    ("budget", "kept"),
    [(420, 4), (419, 1), (330, 1), (329, 0), (100, 0)],
)
def test_rows_are_kept_when_their_statistics_equal_the_budget(budget, kept):
    plan = memory_plan.plan_run(KEPT, held=0, available=available_for(budget))
    assert (plan.kept_rows, plan.essential) == (kept, 230)
    assert plan.statistics == {0: 230, 1: 330, 4: 420}[kept]


# c1: a batch of 8 mean gradients of 1,000 bytes beside statistics of 2,000 bytes (the reference engine, one label:
# Welford mean and M2); all of a batch is in memory when all but its last fit (the last prompt hands its own over)
C1 = RunShape(row=1000, vector=1000, largest=0, labels=1, rows_per_pass=0, rows_per_prompt=0, activations=0,
              c1_vectors=8, c1_reads=1, engine="reference")  # fmt: skip


@pytest.mark.parametrize(("fitting", "in_memory"), [(0, 0), (5, 5), (6, 6), (7, 8), (8, 8), (20, 8)])
def test_c1_s_batch_is_in_memory_when_all_but_its_last_vector_fit(fitting, in_memory):
    plan = memory_plan.plan_run(C1, held=0, available=available_for(2000 + 1000 * fitting + 999))
    assert plan.statistics == 2000
    assert (plan.c1_in_memory, plan.c1_bytes) == (in_memory, 1000 * in_memory)
    assert plan.c1_beside == 1000 * min(in_memory, 7)  # the last one is not held beside a prompt's statistics


def test_a_single_mean_gradient_is_never_held_beside_a_prompt_s_statistics():
    plan = memory_plan.plan_run(replace(C1, c1_vectors=1), held=0, available=available_for(2000))
    assert (plan.c1_in_memory, plan.c1_beside) == (1, 0)


@pytest.mark.parametrize(("room", "in_memory"), [(-5, 0), (0, 0), (6, 6), (7, 8)])
def test_c1_counts_bytes_not_vectors_when_a_vector_is_one_byte(room, in_memory):
    """A one-byte vector (sizes scaled down): the vectors that fit are the bytes left, none when nothing is."""
    plan = memory_plan.plan_run(replace(C1, vector=1, row=1), held=0, available=available_for(2 + room))
    assert plan.statistics == 2
    assert plan.c1_in_memory == in_memory


PARAMS = [torch.zeros(10, 10), torch.zeros(10)]
SIZES = RunSizes(estimators=("grpo",), m=4, k_list=(2,), max_new_tokens=8, c1_batch=2, c1_reads=1)
CONFIG = SimpleNamespace(num_hidden_layers=2, hidden_size=8, intermediate_size=16, vocab_size=50)
VALUES = [0.0, 0.0]  # every prompt's rewards are 0: it likely gives no rows


def fake_host(monkeypatch, held: int, available: int):
    asked = []
    monkeypatch.setattr(allocator, "return_freed_memory", lambda: True)
    monkeypatch.setattr(allocator, "make_resident", lambda params: None)
    monkeypatch.setattr(allocator, "process_resident", lambda: held)
    monkeypatch.setattr(memory, "device_available", lambda device: asked.append(device) or (available, "host"))
    return asked


def test_check_memory_plans_the_run_s_shape_beside_what_the_process_holds(monkeypatch):
    asked = fake_host(monkeypatch, held=1000, available=10**9)
    plan = memory_plan.check_memory(PARAMS, SIZES, "cpu", model_config=CONFIG, values=VALUES)
    shape = memory_plan.run_shape(PARAMS, SIZES, CONFIG, 0, VALUES)
    assert shape.activations > 0 and shape.rows_likely == 0
    assert plan == memory_plan.plan_run(shape, 1000, 10**9, "host")
    assert asked == ["cpu"]


def test_check_memory_on_a_gpu_reads_the_device_s_allocated_and_free_memory(monkeypatch):
    for name in ("return_freed_memory", "make_resident", "process_resident"):
        monkeypatch.setattr(allocator, name, lambda *a, name=name: pytest.fail(f"{name} on a GPU run"))
    devices = []
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: devices.append(device) or 1234)
    monkeypatch.setattr(memory, "device_available", lambda device: devices.append(device) or (10**9, f"on {device}"))
    plan = memory_plan.check_memory(PARAMS, SIZES, "cuda:1")
    assert (plan.held, plan.available, plan.kind) == (1234, 10**9, "on cuda:1")
    assert devices == [torch.device("cuda:1"), "cuda:1"]


@pytest.mark.parametrize(("cap_gb", "available", "kind"), [(2.0, 1_999_999_000, "host"), (1.5, 1_499_999_000, CAPPED)])
def test_max_memory_gb_limits_the_plan_only_when_it_is_below_what_there_is(monkeypatch, cap_gb, available, kind):
    fake_host(monkeypatch, held=1000, available=1_999_999_000)  # 2 GB with what the process holds
    plan = memory_plan.check_memory(PARAMS, replace(SIZES, max_memory_gb=cap_gb), "cpu")
    assert (plan.available, plan.kind) == (available, kind)


def test_check_memory_refuses_in_the_refusal_s_one_line(monkeypatch):
    fake_host(monkeypatch, held=ODD, available=10**9)
    with pytest.raises(UsageError) as refused:
        memory_plan.check_memory(PARAMS, replace(SIZES, max_memory_gb=1.0), "cpu")
    plan = MemoryPlan(ODD, 1, 0, 0, 0, 0, 10**9 - ODD, CAPPED)
    assert str(refused.value).startswith("memory: about ") and "\n" not in str(refused.value)
    assert str(refused.value).endswith(memory_plan.refusal(plan).split("needed at the least", 1)[1])
