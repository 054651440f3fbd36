"""What ``grpo_mse/gradients/memory.py`` says the machine and the engines need, against independent arithmetic.

- ``groups_per_pass`` (auto): the largest group count of at most 64 groups and 128 sequences whose 2 fp32 gradient
  vectors per group fit ``memory_bytes``, found here by enumerating every count.
- ``host_available`` and ``device_available`` read a fake /proc/meminfo, ``os.sysconf`` and
  ``torch.cuda.mem_get_info`` (no test depends on the memory free on this machine).
- ``c1_batch_that_fits``: the largest batch whose ``c1_memory`` plan fits disk and host with the margin kept free,
  at equalities and one byte past them, with mean gradients of 4 GiB (meta tensors: no memory) or of 4 kB.
(Mutation testing found these unchecked, results/mutation.)
"""

import io

import torch

from grpo_mse.gradients import memory
from grpo_mse.gradients.memory import c1_batch_that_fits, c1_memory, device_available, groups_per_pass, host_available


def _enumerated(k, n_params, memory_bytes):
    """The documented rule by enumeration: at most 64 groups, 128 sequences, 2 x 4 bytes a parameter per group."""
    fitting = [g for g in range(1, 65) if g * k <= 128 and g * 2 * 4 * n_params <= memory_bytes]
    return max(fitting, default=1)  # one group per pass always runs (a too-large model fails later, by name)


def test_auto_groups_per_pass_is_the_largest_count_that_fits_by_enumeration():
    cases = [(k, n, 2**31) for k in (1, 2, 3, 5, 7, 8, 64, 127, 128, 129, 256) for n in (1, 1000, 2**24, 2**25)]
    cases += [(2, n, 2**31) for n in (2**26, 2**26 + 1, 3 * 10**7, 2**28, 5 * 10**8)]  # 4, 3, 8, 1, 1 groups
    cases += [(2, 1, m) for m in (8, 15, 16, 24, 100, 1000)] + [(3, 10, m) for m in (79, 80, 240, 10**6)]
    for k, n, m in cases:
        got = groups_per_pass(k, n, memory_bytes=m) if m != 2**31 else groups_per_pass(k, n)
        assert type(got) is int and got == _enumerated(k, n, m), (k, n, m)
    assert groups_per_pass(1, 1000) == 64 and groups_per_pass(3, 1000) == 42  # the group cap, 128 // 3 sequences
    assert groups_per_pass(2, 2**26) == 4 and groups_per_pass(2, 1, memory_bytes=16) == 2  # 2 x 4 B x P a group
    assert groups_per_pass(2, 0) == 64 and groups_per_pass(5, 10**12, requested=7) == 7


MEMINFO = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   12345678 kB\nBuffers: 1 kB\n"


def _fake_host(monkeypatch, meminfo):
    """/proc/meminfo holds ``meminfo`` (None: no /proc, as on macOS); 4096-byte pages, 1000 of them."""

    def fake_open(path, *args, **kwargs):
        if meminfo is None or path != "/proc/meminfo":
            raise FileNotFoundError(path)
        return io.StringIO(meminfo)

    monkeypatch.setattr(memory, "open", fake_open, raising=False)  # the module's name `open`, before builtins
    monkeypatch.setattr(memory.os, "sysconf", {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 1000}.__getitem__)


def test_host_available_is_memavailable_in_bytes_else_the_physical_total(monkeypatch):
    _fake_host(monkeypatch, MEMINFO)
    assert host_available() == 12345678 * 1024  # kB in /proc/meminfo are KiB
    _fake_host(monkeypatch, MEMINFO.replace("MemAvailable", "Cached"))  # kernels before 3.14: no MemAvailable
    assert host_available() == 4096 * 1000
    _fake_host(monkeypatch, None)
    assert host_available() == 4096 * 1000 and type(host_available()) is int


def test_device_available_asks_the_named_cuda_device_and_the_host_otherwise(monkeypatch):
    free = {torch.device("cuda:0"): (3 * 10**9, 80 * 10**9), torch.device("cuda:1"): (7 * 10**9, 80 * 10**9)}
    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: asked.append(device) or free[device])
    monkeypatch.setattr(memory, "host_available", lambda: 5 * 10**9)
    assert device_available("cuda:1") == (7 * 10**9, "free memory on cuda:1")
    assert device_available(torch.device("cuda:0")) == (3 * 10**9, "free memory on cuda:0")
    assert asked == [torch.device("cuda:1"), torch.device("cuda:0")]
    assert device_available("cpu") == device_available(torch.device("cpu")) == (5 * 10**9, "available host memory")
    assert len(asked) == 2  # the CPU never asks CUDA


GIB = 1 << 30
BIG = [torch.empty(GIB, dtype=torch.bfloat16, device="meta")]  # one 4 GiB float32 mean gradient: 2 kept, rest on disk
SMALL = [torch.empty(1000, dtype=torch.float32, device="meta")]  # 4 kB: every one kept in host memory


def test_c1_batch_that_fits_on_disk_is_two_plus_the_spilled_vectors_the_disk_holds():
    assert c1_memory(BIG, 16)["in_memory"] == memory.C1_HOST_BYTES // (4 * GIB) == 2
    host = 10**15  # the host never limits here
    for spilled in (1, 5, 13, 14, 20):
        disk = 2 * spilled * 4 * GIB  # margin 0.5: half the disk, exactly `spilled` files
        assert c1_batch_that_fits(BIG, 16, disk, host, margin=0.5) == min(16, 2 + spilled)
        assert c1_batch_that_fits(BIG, 16, disk - 1, host, margin=0.5) == min(16, 1 + spilled)
    assert c1_batch_that_fits(BIG, 16, 0, host) == 2  # a full disk: only a batch of 2 (no file) fits
    assert c1_batch_that_fits(BIG, 16, 100 * 4 * GIB, host) == 16  # the default margin, 10%
    assert c1_batch_that_fits(BIG, 16, 10 * 4 * GIB, host) == 2 + 9  # 90% of 10 files' room holds 9
    assert c1_batch_that_fits(BIG, 1, 10**15, host) is None  # below a batch of 2: nothing to choose


def test_c1_batch_that_fits_in_host_memory_is_the_largest_batch_whose_plan_fits():
    for batch in (2, 3, 5, 16):
        need = c1_memory(SMALL, batch)["host_bytes"]
        assert need == 4000 * batch + 2 * batch * (2**19 // batch) * 8  # the copies + gram64's two float64 blocks
        assert c1_batch_that_fits(SMALL, 16, 0, 2 * need, margin=0.5) == batch  # no file: a full disk is fine
        assert c1_batch_that_fits(SMALL, 16, 0, 2 * need - 1, margin=0.5) == (batch - 1 if batch > 2 else None)
        assert c1_batch_that_fits(SMALL, 16, 0, need, margin=0) == batch
    need = c1_memory(SMALL, 7)["host_bytes"]
    assert c1_batch_that_fits(SMALL, 16, 10**15, need / 0.9 + 1) == 7  # the default margin: 10% kept free
    assert c1_batch_that_fits(SMALL, 16, 10**15, need / 0.9 - 4) == 6


def test_c1_batch_that_fits_plans_with_the_host_budget_the_batches_use(monkeypatch):
    """The advisor's batches keep ``memory.C1_HOST_BYTES`` of mean gradients in memory (read when they start, as
    tests/gradients/test_c1_memory.py lowers it to spill every one): the plan reads the same value."""
    monkeypatch.setattr(memory, "C1_HOST_BYTES", 0)
    assert c1_batch_that_fits(SMALL, 16, 2 * 3 * 4000, 10**15, margin=0.5) == 3  # every mean gradient in a file
    assert c1_batch_that_fits(SMALL, 16, 0, 10**15) is None
