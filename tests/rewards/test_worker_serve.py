"""The worker's side of the reward pool (``worker_pool._serve``), run in THIS process, and the pool's small helpers.

``_serve`` normally runs in a fresh interpreter that mutmut cannot watch, so these tests give it, on file
descriptors 0, 1 and 2, the pipes a ``_Worker`` hands its child (requests in, replies out, stderr), run it to the end
of its input, and read back every byte it wrote: the replies are decoded frame by frame (4-byte big-endian length,
then the pickle: multiprocessing's documented framing), so stray output in the reply stream fails the test instead of
hanging it. The address-space limit is recorded, not applied (it would bind the test process itself).
"""

from __future__ import annotations

import operator
import os
import pickle
import resource
import struct
import sys
import time
from multiprocessing.connection import Connection

import pytest

from grpo_mse.rewards import worker_pool

NO_MESSAGE = object()  # the parent closed the pipe before sending the preload list


def _drain(fd: int) -> bytes:
    """Every byte already in the pipe ``fd`` (its writers are closed or done), without blocking."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _frames(data: bytes) -> list:
    """The messages in a Connection byte stream; fails on bytes that are not whole frames."""
    messages = []
    while data:
        assert len(data) >= 4, f"reply stream ends in a partial header: {data!r}"
        (size,) = struct.unpack("!i", data[:4])
        assert 0 < size <= len(data) - 4, f"reply stream corrupted: {data[:40]!r}"
        messages.append(pickle.loads(data[4 : 4 + size]))
        data = data[4 + size :]
    return messages


def _serve(monkeypatch, preload=(), requests=(), limit_error: type[Exception] | None = None):
    """Run ``_serve`` on fresh pipes; ``(replies, stderr bytes, setrlimit calls)`` once it has returned."""
    calls = []

    def setrlimit(which, limits):
        calls.append((which, limits))
        if limit_error is not None:
            raise limit_error("refused")

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    err_r, err_w = os.pipe()
    writer = Connection(req_w, readable=False)  # all requests fit the pipe's 64 KiB before the worker reads any
    if preload is not NO_MESSAGE:
        writer.send(tuple(preload))
        for request in requests:
            writer.send(request)
    writer.close()  # EOF after the last request: the worker's signal to exit
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        for fd, target in zip((0, 1, 2), (req_r, rep_w, err_w), strict=True):
            os.dup2(target, fd)
        for fd in (req_r, rep_w, err_w):
            os.close(fd)
        worker_pool._serve()
    finally:
        for fd, copy in zip((0, 1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
    try:
        return _frames(_drain(rep_r)), _drain(err_r), calls
    finally:
        os.close(rep_r)
        os.close(err_r)


def test_worker_says_ready_then_answers_each_request_in_order(monkeypatch):
    """The reply stream: "ready" after the preload, then ``(True, value)`` per request, nothing else."""
    replies, _, _ = _serve(monkeypatch, (), [(pow, (2, 10)), (divmod, (17, 5)), (max, ([3, 9, 4],))])
    assert replies == ["ready", (True, 1024), (True, (3, 2)), (True, 9)]


def test_worker_imports_its_preload_and_skips_missing_modules(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    replies, _, _ = _serve(monkeypatch, ("colorsys", "no_such_module_for_the_worker"), [(abs, (-3,))])
    assert replies == ["ready", (True, 3)]
    assert "colorsys" in sys.modules


def test_worker_reports_errors_and_keeps_serving(monkeypatch):
    """An exception (even SystemExit) becomes ``(False, "Type: message")``, cut to 500 characters; the next
    request is still answered."""
    long_key = "k" * 600
    long_message = f"KeyError: '{long_key}'"
    replies, _, _ = _serve(
        monkeypatch,
        (),
        [(divmod, (1, 0)), (sys.exit, (3,)), (operator.getitem, ({}, long_key)), (pow, (3, 2))],
    )
    assert replies == [
        "ready",
        (False, "ZeroDivisionError: integer division or modulo by zero"),
        (False, "SystemExit: 3"),
        (False, long_message[:500]),
        (True, 9),
    ]
    assert len(replies[3][1]) == 500 < len(long_message)


def test_what_the_checked_code_prints_goes_to_stderr_not_into_the_replies(monkeypatch):
    replies, stderr, _ = _serve(monkeypatch, (), [(os.write, (1, b"noise from fd 1")), (pow, (2, 3))])
    assert replies == ["ready", (True, len(b"noise from fd 1")), (True, 8)]
    assert stderr == b"noise from fd 1"


def test_worker_limits_its_address_space(monkeypatch):
    replies, _, calls = _serve(monkeypatch, (), [])
    assert calls == [(resource.RLIMIT_AS, (worker_pool.MEMORY_LIMIT, worker_pool.MEMORY_LIMIT))]
    assert replies == ["ready"]


@pytest.mark.parametrize("refusal", [ValueError, OSError])
def test_worker_serves_where_the_limit_cannot_be_set(monkeypatch, refusal):
    """A host that refuses the limit (a lower hard limit, no RLIMIT_AS) still gets a working worker."""
    replies, _, calls = _serve(monkeypatch, (), [(pow, (2, 5))], limit_error=refusal)
    assert len(calls) == 1
    assert replies == ["ready", (True, 32)]


def test_worker_exits_quietly_when_the_parent_closes_before_the_preload(monkeypatch):
    replies, stderr, _ = _serve(monkeypatch, NO_MESSAGE)
    assert (replies, stderr) == ([], b"")


@pytest.fixture
def renamed_process():
    """This process named like a program whose name holds ")" and spaces, as ``/proc/<pid>/stat`` then shows it."""
    with open("/proc/self/comm") as handle:
        name = handle.read().rstrip("\n")
    with open("/proc/self/comm", "w") as handle:
        handle.write("x) a b c d e f")
    yield
    with open("/proc/self/comm", "w") as handle:
        handle.write(name)


@pytest.mark.skipif(not os.path.exists("/proc/self/comm"), reason="Linux /proc only")
def test_cpu_seconds_reads_a_process_whose_name_holds_a_parenthesis(renamed_process):
    """The fields after the name are found from its LAST ")": a name with ")" and spaces shifts nothing."""
    with open(f"/proc/{os.getpid()}/stat", "rb") as handle:
        assert b"(x) a b c d e f) " in handle.read()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert abs(worker_pool.cpu_seconds(os.getpid()) - time.process_time()) < 0.05


@pytest.mark.parametrize(("setting", "size"), [("7", 7), ("1", 1), ("0", 1)])
def test_shared_pool_sizes_from_the_environment_and_keeps_its_preload(monkeypatch, setting, size):
    """``GRPO_REWARD_WORKERS`` sets the size (at least 1); one pool per preload list, which its workers import."""
    monkeypatch.setattr(worker_pool, "_POOLS", {})
    monkeypatch.setenv("GRPO_REWARD_WORKERS", setting)
    pool = worker_pool.shared_pool(["colorsys"])
    assert (pool.max_workers, pool.preload) == (size, ("colorsys",))
    assert worker_pool.shared_pool(("colorsys",)) is pool
    assert worker_pool.shared_pool(()) is not pool
