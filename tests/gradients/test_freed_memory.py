"""allocator.reuse_freed_memory: a freed model-sized block stays in the process and the next one of the same size takes
its pages without faulting them in again (glibc's malloc and free, as torch's CPU allocator calls them). On this VM
each first touch costs ~1-2 s of system time a GiB; a Qwen gradient row is 2.5 GB, above the largest trim threshold
glibc takes as a positive int (2 GiB - 1)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from grpo_mse.gradients import memory_plan

SCRIPT = textwrap.dedent(
    """
    import ctypes, resource, sys
    from grpo_mse.gradients import allocator, memory_plan

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    if sys.argv[1] == "reuse":
        assert allocator.reuse_freed_memory()
    size = int(2.2e9)  # above 2 GiB: a trim threshold of 2**31 - 1 would hand the freed block back to the kernel
    faults = []
    for _ in range(2):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)
        libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(faults[0], faults[1])
    """
)


def page_faults(mode: str) -> tuple[int, int]:
    result = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    first, second = (int(word) for word in result.stdout.split())
    return first, second


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_block_above_2_gib_is_reused_without_faulting_its_pages_again():
    pages = int(2.2e9) // 4096
    first, second = page_faults("reuse")
    assert first >= 0.9 * pages  # the first touch faults every page in
    assert second <= 0.01 * pages, (first, second)  # the second block takes the freed pages
    plain_first, plain_second = page_faults("plain")  # glibc's defaults: mmap'd, unmapped when freed
    assert plain_second >= 0.9 * pages, (plain_first, plain_second)


HOLD = textwrap.dedent(
    """
    import ctypes, sys
    from grpo_mse.gradients import allocator, memory_plan

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    assert allocator.reuse_freed_memory()
    size = 400 * 2**20
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    keep = libc.malloc(4096)  # a live object above the freed block, as a cached kernel's is in a run's heap
    libc.free(block)
    held = allocator.process_resident()
    plan = memory_plan.MemoryPlan(0, 0, int(sys.argv[1]), 0, 0, 0, 0)  # needed: what the argument says
    released = memory_plan.hold_to_plan(plan, "cpu")
    print(int(released), held, allocator.process_resident())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_a_process_above_its_plan_hands_freed_pages_back_between_prompts():
    """hold_to_plan: freed pages kept for reuse stay while the process is within its plan's likely peak, and go back
    to the kernel when it is above it (glibc's malloc_trim releases free pages in the heap's middle too)."""
    runs = {}
    for needed in (10**12, 0):
        result = subprocess.run([sys.executable, "-c", HOLD, str(needed)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        runs[needed] = [int(word) for word in result.stdout.split()]
    within, above = runs[10**12], runs[0]
    assert within[0] == 0 and within[2] >= within[1] - 50 * 2**20  # nothing handed back within the plan
    assert above[0] == 1 and above[2] <= above[1] - 300 * 2**20, above  # the freed 400 MiB went back
    assert (
        memory_plan.hold_to_plan(None, "cpu") is False
        and memory_plan.hold_to_plan(memory_plan.MemoryPlan(0, 0, 0, 0, 0, 0, 0), "cuda:0") is False
    )
