"""grpo_mse.gradients.allocator against what the kernel and glibc say independently: resident bytes and the peak as
/proc/self/status and getrusage give them, glibc's functions found where the C library is not named libc.so.6 or
ctypes cannot name it, freed blocks kept for reuse (no page faulted in again) and handed back on request, and a
memory-mapped model's pages made resident. The plan (memory_plan) prints these numbers and sizes runs by them.

Measurements that depend on glibc's settings run in a fresh interpreter (the test process may already have them:
tracecov's own tests call reuse_freed_memory); each test also calls what it checks in this process, so that mutation
testing, which maps tests to functions by the calls it sees, runs it."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_mse.gradients import allocator

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
PAGE = mmap.PAGESIZE
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")


def status_bytes(field: bytes) -> int:
    """A ``kB`` line of /proc/self/status in bytes, read as bytes (the process name in it may be any bytes)."""
    with open("/proc/self/status", "rb") as status:
        line = next(line for line in status if line.startswith(field + b":"))
    return int(line.split()[1]) * 1024


def python_in_root(script: str, *args: str) -> list[int]:
    """Run ``script`` in a fresh interpreter that imports this checkout; its printed integers."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return [int(word) for word in result.stdout.split()]


@linux_only
def test_resident_bytes_are_vmrss_and_grow_by_the_pages_touched():
    """process_resident: VmRSS in bytes (an int), and a 64 MiB anonymous mapping, once each page is written, adds
    64 MiB to it (a mapping, not malloc, so that no freed heap pages are reused)."""
    size = 64 * MIB
    before = allocator.process_resident()
    block = mmap.mmap(-1, size)
    view = (ctypes.c_char * size).from_buffer(block)
    try:
        ctypes.memset(view, 1, size)
        after = allocator.process_resident()
        kernel = status_bytes(b"VmRSS")
    finally:
        del view
        block.close()
    assert isinstance(after, int)
    assert abs(after - kernel) < 4 * MIB, (after, kernel)
    assert abs(after - before - size) < 8 * MIB, (before, after)


def test_without_proc_resident_is_zero_and_the_peak_is_getrusage_s(monkeypatch):
    """Where /proc cannot be read, nothing is counted as held (0: hold_to_plan then never trims) and the peak is
    ru_maxrss (KiB on Linux) in bytes."""

    def no_proc(*args, **kwargs):
        raise FileNotFoundError(args[0])

    monkeypatch.setattr(allocator, "open", no_proc, raising=False)
    assert allocator.process_resident() == 0
    low = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = allocator.process_peak()
    high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert isinstance(peak, int) and low <= peak <= high, (low, peak, high)


PEAK = "from grpo_mse.gradients.allocator import process_peak; print(process_peak())"


@linux_only
def test_the_peak_is_vmhwm_in_bytes_and_the_command_s_own_not_its_parent_s():
    """process_peak is VmHWM in bytes. A command started by a large process (a test runner, a notebook): Linux
    carries ru_maxrss across exec, so it gave the parent's size; process_peak reads the command's own mark."""
    parent = bytearray(600 * MIB)
    parent[::PAGE] = b"\1" * len(parent[::PAGE])  # resident, not just reserved
    low = status_bytes(b"VmHWM")
    peak = allocator.process_peak()
    high = status_bytes(b"VmHWM")
    assert isinstance(peak, int) and len(parent) < low <= peak <= high, (low, peak, high)
    (child,) = python_in_root(PEAK)
    assert child < 400 * MIB < len(parent)


@linux_only
def test_the_peak_is_read_whatever_the_process_is_named():
    """/proc/self/status starts with the process's name, which is any bytes (a script run as ./café.py is named so,
    prctl can set \\xff): an ascii read of the file raised UnicodeDecodeError at the end of a run."""
    libc = ctypes.CDLL(None)
    with open("/proc/self/comm", "rb") as comm:
        name = comm.read().rstrip(b"\n")
    assert libc.prctl(15, b"caf\xc3\xa9-\xff", 0, 0, 0) == 0  # PR_SET_NAME
    try:
        low = status_bytes(b"VmHWM")
        peak = allocator.process_peak()
        high = status_bytes(b"VmHWM")
    finally:
        libc.prctl(15, name, 0, 0, 0)
    assert low <= peak <= high


@linux_only
def test_glibc_functions_are_glibc_s_and_only_glibc_s():
    """A function of the C library is found; one of the Python interpreter (which the process's global symbols
    also hold) or a made-up one is not."""
    assert callable(allocator.glibc_function("malloc_trim"))
    assert allocator.glibc_function("Py_IsInitialized") is None
    assert allocator.glibc_function("no_such_function_in_glibc") is None


@linux_only
def test_glibc_is_found_when_ctypes_cannot_name_it(monkeypatch):
    """ctypes.util.find_library finds nothing in a container without ldconfig or a compiler: glibc is then opened by
    its soname, libc.so.6, not as the program itself."""
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert callable(allocator.glibc_function("mallopt"))
    assert allocator.glibc_function("Py_IsInitialized") is None


@linux_only
def test_glibc_is_found_by_the_name_ctypes_gives_it(monkeypatch):
    """Where glibc's file is not libc.so.6 (libc.so.6.1 on Alpha and IA-64), the name find_library gives for "c" is
    the one opened. Simulated: find_library knows only "c", and no library named libc.so.6 can be opened."""
    opened = ctypes.CDLL("libc.so.6")
    real_cdll = ctypes.CDLL

    def cdll(name, *args, **kwargs):
        if name == "libc.so.6.1":
            return opened
        if name == "libc.so.6":
            raise OSError("libc.so.6: cannot open shared object file")
        return real_cdll(name, *args, **kwargs)

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libc.so.6.1" if name == "c" else None)
    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert allocator.glibc_function("malloc_trim") is not None
    assert allocator.glibc_function("Py_IsInitialized") is None


FREED = textwrap.dedent(
    """
    import ctypes, resource, sys
    from grpo_mse.gradients import allocator

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    reused = int(allocator.reuse_freed_memory()) if sys.argv[1] == "reuse" else -1
    size = 64 * 2**20  # above glibc's largest mmap threshold (32 MiB): mmap'd, and unmapped when freed, by default
    faults = []
    for _ in range(2):  # the second block takes the first's freed pages, or faults each of its own in
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)
        libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(reused, faults[1])
    """
)


HUGE = textwrap.dedent(
    """
    import ctypes, sys
    from grpo_mse.gradients import allocator

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    if sys.argv[1] == "reuse":
        allocator.reuse_freed_memory()

    def data():
        with open("/proc/self/status", "rb") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith(b"VmData:"))

    block = libc.malloc(int(2.2e9))  # address space only: no page of it is touched
    held = data()
    libc.free(block)
    print(held - data())
    """
)


def address_space_returned(mode: str, processes: int) -> list[int]:
    """Bytes of address space (VmData) a freed 2.2 GB block gives back, in each of ``processes`` fresh interpreters
    (address-space layouts differ from process to process)."""
    runs = [
        subprocess.Popen([sys.executable, "-c", HUGE, mode], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for _ in range(processes)
    ]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    return [int(output) for output in outputs]


def libc_malloc():
    """glibc's malloc and free, typed."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


@linux_only
def test_freed_blocks_are_kept_for_reuse_and_handed_back_when_asked():
    """reuse_freed_memory (True when set): a freed 64 MiB block stays in the process, and the next one takes its pages
    without a fault (glibc's defaults: ~16k faults, one a page); return_freed_memory (True when it returned some)
    hands freed pages in the heap's middle back to the kernel."""
    pages = 64 * MIB // PAGE
    reused, faults = python_in_root(FREED, "reuse")
    assert reused == 1 and faults <= 0.01 * pages, (reused, faults)
    _, plain_faults = python_in_root(FREED, "plain")
    assert plain_faults >= 0.9 * pages  # the measure sees the faults that reuse saves
    # a Qwen gradient row (2.5 GB) is above any positive trim threshold mallopt takes (an int: 2 GiB - 1)
    assert max(address_space_returned("reuse", 6)) < 0.1e9
    assert min(address_space_returned("plain", 1)) > 2e9  # glibc's defaults: mapped, and unmapped when freed
    assert allocator.reuse_freed_memory() is True  # here too: the block below comes from the heap, not a mapping
    libc = libc_malloc()
    block = libc.malloc(64 * MIB)
    ctypes.memset(block, 1, 64 * MIB)
    keep = libc.malloc(4096)  # a live object above the freed block: the block is in the heap's middle, not its top
    libc.free(block)
    held = status_bytes(b"VmRSS")
    try:
        assert allocator.return_freed_memory() is True
        assert status_bytes(b"VmRSS") <= held - 48 * MIB
    finally:
        libc.free(keep)


@linux_only
def test_a_memory_mapped_model_is_made_resident_and_other_devices_left_alone(tmp_path):
    """make_resident: weights read from a memory-mapped file (one byte and four byte elements) count in VmRSS once it
    has run, every page of them; an empty tensor is skipped, and a tensor outside host memory (the meta device here, a
    GPU's in a run) is not read at all."""
    import torch
    from torch.overrides import TorchFunctionMode

    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(48 * MIB))
    weights = [
        torch.from_file(str(path), shared=False, size=16 * MIB, dtype=torch.uint8),
        torch.from_file(str(path), shared=False, size=8 * MIB, dtype=torch.float32),
    ]
    before = status_bytes(b"VmRSS")
    allocator.make_resident([*weights, torch.empty(0)])
    assert status_bytes(b"VmRSS") - before >= 0.9 * 48 * MIB

    class Reads(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    with Reads() as reads:
        allocator.make_resident([torch.empty(4 * MIB, device="meta")])
    assert not [call for call in reads.calls if call in {"sum", "reshape", "__getitem__", "detach"}], reads.calls
