"""Run a function in a worker process with a limit on its own compute; a worker that overruns is killed and replaced.

``WorkerPool.call(fn, args, timeout, default)`` returns ``fn(*args)`` computed in one of a few
long-lived worker processes, or ``default`` when the call's own compute overruns ``timeout``
seconds, raises, or the worker dies. The limit counts only the worker's CPU time on this call
(Linux ``/proc``; wall-clock time since the request elsewhere), with a wall-clock backstop of
``WALL_FACTOR`` x ``timeout``: waiting for a free worker, a new worker's start-up and a host
busy with other processes never score an answer ``default``; the caller waits instead.
Workers are fresh interpreters (``python -m grpo_mse.rewards.worker_pool``) talking over pipes:
safe to use from threads, and they never re-run the caller's ``__main__``. Each call has a
worker to itself, so killing one overrunning worker never disturbs the calls in the others, and
its replacement starts in the background. ``fn`` must be importable (a module-level function).
A worker exits when its parent closes the pipe.
"""

from __future__ import annotations

import importlib
import os
import queue
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))
STARTUP_TIMEOUT = 60.0  # seconds for a new worker to import its modules and report ready
MEMORY_LIMIT = 4 << 30  # bytes of address space per worker (Linux), so a runaway sympy integer cannot swap the host
WALL_FACTOR = 20.0  # wall-clock backstop per call, in multiples of its limit (a worker stuck off the CPU)
POLL_SECONDS = 0.25  # how often a waiting caller re-checks for a free worker or a free slot
START_ATTEMPTS = 3  # a call that finds no worker running tries this many start-ups before scoring ``default``
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by process ``pid`` (Linux ``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: fields 14 and 15
    except (OSError, IndexError, ValueError):
        return None


def _serve() -> None:
    """Worker loop on inherited stdin/stdout: read the modules to preload (the first message), import them, say
    ready, answer ``(fn, args)`` until EOF."""
    from multiprocessing.connection import Connection

    out = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # anything the checked code prints goes to stderr, not into the reply stream
    inbox = Connection(os.dup(0), writable=False)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):
        pass
    try:
        preload = inbox.recv()
    except (EOFError, OSError):
        return
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    out.send("ready")
    while True:
        try:
            fn, args = inbox.recv()
        except (EOFError, OSError):
            return
        try:
            out.send((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - report anything to the caller, keep serving
            out.send((False, f"{type(exc).__name__}: {exc}"[:500]))


class _Worker:
    """One worker: a fresh interpreter (``python -m grpo_mse.rewards.worker_pool``; never re-imports ``__main__``)."""

    def __init__(self, preload: tuple[str, ...]):
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal reaches the parent only
        )
        self.conn_in = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.conn_out = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.process.stdout.close()
        self.process.stdin.close()
        self.conn_out.send(tuple(preload))  # the worker's first message: the modules it imports before "ready"
        if not self.conn_in.poll(STARTUP_TIMEOUT) or self.conn_in.recv() != "ready":
            self.kill()
            raise TimeoutError("reward worker did not start")

    def run(self, fn, args, timeout: float):
        """``(ok, value)`` of ``fn(*args)``; TimeoutError once the call used ``timeout`` s of this worker's CPU
        (wall-clock where CPU time is unreadable) or ``WALL_FACTOR * timeout`` s of wall clock; EOFError if
        the worker died."""
        cpu_start, wall_start = cpu_seconds(self.process.pid), time.monotonic()
        self.conn_out.send((fn, args))
        wait = timeout
        while not self.conn_in.poll(wait):
            elapsed = time.monotonic() - wall_start
            cpu_now = cpu_seconds(self.process.pid) if cpu_start is not None else None
            used = elapsed if cpu_now is None else cpu_now - cpu_start
            if used >= timeout or elapsed >= WALL_FACTOR * timeout:
                raise TimeoutError
            wait = max(min(timeout - used, WALL_FACTOR * timeout - elapsed), 0.02)
        return self.conn_in.recv()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=5)
        self.conn_in.close()
        self.conn_out.close()


class WorkerPool:
    """Up to ``max_workers`` workers, started on demand and replaced after a timeout or a crash."""

    def __init__(self, max_workers: int = MAX_WORKERS, preload: tuple[str, ...] = ()):
        self.max_workers, self.preload = max_workers, tuple(preload)
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._started = 0
        self.timeouts = 0  # calls whose own compute overran their limit

    def _acquire(self) -> _Worker | None:
        """An idle worker, else a new one, else the first one freed (waiting as long as it takes); None only
        when START_ATTEMPTS start-ups failed while no other worker was running."""
        failures = 0
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            if self._reserve():
                worker = self._launch()
                if worker is not None:
                    return worker
                failures += 1
                with self._lock:
                    alone = self._started == 0
                if alone and failures >= START_ATTEMPTS:
                    return None
            try:
                return self._idle.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue

    def _retire(self, worker: _Worker) -> None:
        """Kill ``worker`` and start its replacement in the background, so the next call finds one ready."""
        worker.kill()
        with self._lock:
            self._started -= 1
        threading.Thread(target=self._prestart, daemon=True).start()

    def _reserve(self) -> bool:
        """Count one more worker if fewer than ``max_workers`` run; False when the pool is full."""
        with self._lock:
            if self._started >= self.max_workers:
                return False
            self._started += 1
            return True

    def _launch(self) -> _Worker | None:
        """Start a reserved worker; None (and the reservation released) when it fails to start."""
        try:
            return _Worker(self.preload)
        except (TimeoutError, OSError, EOFError):
            with self._lock:
                self._started -= 1
            return None

    def _prestart(self) -> None:
        worker = self._launch() if self._reserve() else None
        if worker is not None:
            self._idle.put(worker)

    def call(self, fn, args=(), timeout: float = 5.0, default=None):
        """``fn(*args)`` in a worker, or ``default`` once it used ``timeout`` s of its own compute, on an error or a
        crash. Waiting for a free worker and a new worker's start-up are not counted: the caller waits."""
        worker = self._acquire()
        if worker is None:
            return default
        try:
            ok, value = worker.run(fn, args, timeout)
        except TimeoutError:
            self.timeouts += 1
            self._retire(worker)
            return default
        except (EOFError, OSError, BrokenPipeError):
            self._retire(worker)
            return default
        self._idle.put(worker)
        return value if ok else default


_POOLS: dict[tuple, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(preload: tuple[str, ...] = ()) -> WorkerPool:
    """The process-wide pool for ``preload`` (created on first use; ``GRPO_REWARD_WORKERS`` sets its size)."""
    key = tuple(preload)
    with _POOLS_LOCK:
        if key not in _POOLS:
            size = int(os.environ.get("GRPO_REWARD_WORKERS", MAX_WORKERS))
            _POOLS[key] = WorkerPool(max(1, size), key)
        return _POOLS[key]


if __name__ == "__main__":
    _serve()
