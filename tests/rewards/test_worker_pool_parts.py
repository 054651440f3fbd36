"""The worker pool's parts (issue 58): the run loop's limits on a simulated clock, the pool's worker accounting with
fake workers (no processes), and the few properties only a real worker process shows (its own session, silenced
output, errors scored ``default``, a bounded start-up)."""

from __future__ import annotations

import os
import threading
import time
import types

import pytest

from grpo_mse.rewards import worker_pool
from grpo_mse.rewards.worker_pool import WorkerPool, _Worker

BOUND = 20.0  # seconds a pool operation on fake workers may take before the test calls it hung (they take ms)


def _within(fn, seconds=BOUND):
    """``fn()`` in a daemon thread; fails the test (instead of hanging it) when it has not returned in ``seconds``."""
    box = {}
    thread = threading.Thread(target=lambda: box.__setitem__("value", fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the pool hung"
    return box["value"]


def _until(condition, seconds=BOUND):
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "condition never held"
        time.sleep(0.005)


# --- _Worker.run on a simulated clock: a fake worker whose CPU use is a function of simulated wall time ---------


class _Sim:
    """Simulated wall clock ``now``; the worker's CPU reading is ``cpu(now)``; its reply is ready at ``done``."""

    def __init__(self, cpu, done=float("inf"), readable=lambda calls: True):
        self.now, self.cpu, self.done, self.readable, self.reads, self.waits = 0.0, cpu, done, readable, 0, []

    def poll(self, wait):
        self.waits.append(wait)
        if self.now + wait >= self.done:
            self.now = self.done
            return True
        self.now += wait
        return False

    def cpu_seconds(self, pid):
        self.reads += 1
        return self.cpu(self.now) if self.readable(self.reads) else None

    def run(self, monkeypatch, timeout):
        monkeypatch.setattr(worker_pool, "cpu_seconds", self.cpu_seconds)
        monkeypatch.setattr(worker_pool, "time", types.SimpleNamespace(monotonic=lambda: self.now))
        worker = _Worker.__new__(_Worker)
        worker.process = types.SimpleNamespace(pid=1)
        worker.conn_out = types.SimpleNamespace(send=lambda message: None)
        worker.conn_in = types.SimpleNamespace(poll=self.poll, recv=lambda: (True, "answer"))
        try:
            return worker.run(len, (), timeout)
        except TimeoutError:
            return ("timeout", self.now)


def test_run_stops_once_the_cpu_limit_is_used_exactly(monkeypatch):
    """A CPU-bound call reaches its 0.5 s limit exactly at the first check: timed out right then, not a poll later."""
    assert _Sim(cpu=lambda t: t).run(monkeypatch, 0.5) == ("timeout", 0.5)
    assert _Sim(cpu=lambda t: t, done=0.25).run(monkeypatch, 0.5) == (True, "answer")


def test_run_stops_at_the_wall_backstop_exactly(monkeypatch):
    """A worker that used 0.3125 s of CPU then stalled: the checks never overshoot the remaining CPU budget
    (0.1875 s) nor the wall backstop (20 x 0.5 = 10 s), so the call ends at 10.0 s exactly; one that never runs
    ends there too. Dyadic numbers keep the simulated sums exact."""
    stalled = _Sim(cpu=lambda t: min(t, 0.3125))
    assert stalled.run(monkeypatch, 0.5) == ("timeout", 10.0)
    assert max(stalled.waits) == 0.5 and min(stalled.waits) == 0.125
    assert _Sim(cpu=lambda t: 0.0).run(monkeypatch, 0.5) == ("timeout", 10.0)
    # a reply that comes at 9.9 s (before the backstop) is still the answer
    assert _Sim(cpu=lambda t: min(t, 0.3125), done=9.9).run(monkeypatch, 0.5) == (True, "answer")


def test_run_waits_no_longer_than_the_cpu_budget_left(monkeypatch):
    """A worker on a quarter of a CPU reaches 0.5 s of CPU at 2.0 s of wall clock; the call ends within one minimal
    poll (0.02 s) of that, and a reply at 2.1 s comes too late."""
    slow = _Sim(cpu=lambda t: t / 4)
    outcome, at = slow.run(monkeypatch, 0.5)
    assert outcome == "timeout" and 2.0 <= at <= 2.0 + 0.02 + 1e-9
    assert _Sim(cpu=lambda t: t / 4, done=2.1).run(monkeypatch, 0.5)[0] == "timeout"


def test_run_falls_back_to_wall_clock_when_cpu_time_is_unreadable(monkeypatch):
    """No /proc reading at the start of a call (or at all): the limit is wall-clock time since the request."""
    assert _Sim(cpu=lambda t: 0.0, readable=lambda calls: False).run(monkeypatch, 0.5) == ("timeout", 0.5)
    assert _Sim(cpu=lambda t: 0.0, readable=lambda calls: calls > 1).run(monkeypatch, 0.5) == ("timeout", 0.5)


def test_kill_waits_a_bounded_time(monkeypatch):
    """Killing a worker reaps it with a finite wait (a process that cannot be reaped must not hang the caller)."""
    waits = []
    worker = _Worker.__new__(_Worker)
    worker.process = types.SimpleNamespace(kill=lambda: None, wait=lambda timeout: waits.append(timeout))
    worker.conn_in = worker.conn_out = types.SimpleNamespace(close=lambda: None)
    worker.kill()
    assert len(waits) == 1 and waits[0] is not None and waits[0] > 0


# --- WorkerPool accounting with fake workers -------------------------------------------------------------------


class _Fakes:
    """Stands in for ``_Worker``: records every start and kill; ``fail`` start-ups raise; ``gate`` (when set)
    holds each start-up until released. ``run`` computes ``fn(*args)`` here; ``TimeoutError``/``EOFError`` as
    ``fn`` make the call time out / the worker die."""

    def __init__(self, fail=0):
        self.fail, self.attempts, self.workers, self.gate, self.entered = fail, 0, [], None, threading.Event()
        fakes = self

        class Worker:
            def __init__(self, preload):
                fakes.attempts += 1
                fakes.entered.set()
                if fakes.gate is not None:
                    fakes.gate.wait(BOUND)
                if fakes.attempts <= fakes.fail:
                    raise TimeoutError("reward worker did not start")
                self.killed, self.timeouts = False, []
                fakes.workers.append(self)

            def run(self, fn, args, timeout):
                self.timeouts.append(timeout)
                if fn in (TimeoutError, EOFError):
                    raise fn
                return True, fn(*args)

            def kill(self):
                self.killed = True

        self.cls = Worker

    def live(self):
        return sum(not worker.killed for worker in self.workers)


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setattr(worker_pool, "POLL_SECONDS", 0.01)
    made = _Fakes()
    monkeypatch.setattr(worker_pool, "_Worker", made.cls)
    return made


def test_one_worker_pool_reuses_replaces_and_counts(fakes):
    """max_workers=1: calls reuse one worker; a timed-out or dead worker is killed, ``timeouts`` counts only the
    overruns, and its replacement starts in the background, so every later call still gets a worker."""
    pool = WorkerPool(max_workers=1)
    assert _within(lambda: [pool.call(abs, (-3,)), pool.call(abs, (-4,))]) == [3, 4]
    assert len(fakes.workers) == 1 and fakes.workers[0].timeouts == [5.0, 5.0]  # the documented default limit
    for round_ in range(2):
        assert _within(lambda: pool.call(TimeoutError, default="late")) == "late"
        assert pool.timeouts == round_ + 1
        _until(lambda want=round_ + 2: len(fakes.workers) == want)  # the replacement, started with no call waiting
        assert fakes.live() == 1
    assert _within(lambda: pool.call(EOFError, default="dead")) == "dead"
    assert pool.timeouts == 2
    assert _within(lambda: pool.call(abs, (-5,))) == 5
    assert len(fakes.workers) == 4 and fakes.live() == 1


def test_replacement_starts_in_a_daemon_thread(fakes):
    """The background start-up must not keep the interpreter alive at exit (it may take up to STARTUP_TIMEOUT)."""
    pool = WorkerPool(max_workers=1)
    assert _within(lambda: pool.call(abs, (-1,))) == 1
    before = set(threading.enumerate())
    fakes.gate, fakes.entered = threading.Event(), threading.Event()
    try:
        # called from the main (non-daemon) thread: a thread inherits its creator's daemon flag unless told
        assert pool.call(TimeoutError, default="late") == "late"
        assert fakes.entered.wait(BOUND), "no replacement was started"
        started = [thread for thread in threading.enumerate() if thread not in before and thread.is_alive()]
        assert started and all(thread.daemon for thread in started)
    finally:
        fakes.gate.set()


def test_failed_start_ups_score_default_after_start_attempts(fakes):
    """No worker can start: the call tries START_ATTEMPTS start-ups, then scores ``default``; starts that fail a
    few times and then succeed still answer."""
    fakes.fail = 10**6
    pool = WorkerPool(max_workers=1)
    assert _within(lambda: pool.call(abs, (-1,), default="none")) == "none"
    assert fakes.attempts == worker_pool.START_ATTEMPTS
    assert _within(lambda: pool.call(abs, (-1,), default="none")) == "none"  # the count of running workers recovered
    assert fakes.attempts == 2 * worker_pool.START_ATTEMPTS
    fakes.fail, fakes.attempts = worker_pool.START_ATTEMPTS - 1, 0
    assert _within(lambda: pool.call(abs, (-2,), default="none")) == 2


def test_a_failed_start_while_others_run_waits_for_a_free_worker(fakes):
    """Two workers: one busy, the start-ups of a second keep failing; the next call waits for the busy one rather
    than scoring ``default``."""
    pool = WorkerPool(max_workers=2)
    release = threading.Event()
    busy = threading.Thread(target=lambda: pool.call(release.wait, (BOUND,)), daemon=True)
    busy.start()
    _until(lambda: len(fakes.workers) == 1)
    fakes.fail = 10**6
    waiting = threading.Thread(target=lambda: fakes.__setattr__("answer", pool.call(abs, (-7,), default="none")))
    waiting.daemon = True
    waiting.start()
    _until(lambda: fakes.attempts > worker_pool.START_ATTEMPTS + 1)
    release.set()
    waiting.join(BOUND)
    assert fakes.answer == 7


def test_never_more_workers_than_max_workers(fakes):
    """After a timeout (worker replaced), two calls hold both workers of a 2-worker pool; a third waits for one of
    them instead of starting a third worker, and a full pool's background start-up starts nothing."""
    pool = WorkerPool(max_workers=2)
    assert _within(lambda: pool.call(TimeoutError, default="late")) == "late"
    _until(lambda: len(fakes.workers) == 2)
    release = threading.Event()
    holders = [threading.Thread(target=pool.call, args=(release.wait, (BOUND,)), daemon=True) for _ in range(2)]
    for holder in holders:
        holder.start()
    _until(lambda: sum(len(worker.timeouts) for worker in fakes.workers) == 3)  # both holders run
    third = threading.Thread(target=lambda: fakes.__setattr__("answer", pool.call(abs, (-9,))), daemon=True)
    third.start()
    third.join(0.3)
    assert fakes.live() == 2
    pool._prestart()  # a full pool: no extra worker
    assert fakes.live() == 2
    release.set()
    third.join(BOUND)
    assert fakes.answer == 9 and fakes.live() == 2


# --- real worker processes ---------------------------------------------------------------------------------------


def test_real_worker_runs_in_its_own_silenced_session(capfd):
    """A real worker: its own session (Ctrl-C reaches the parent only), what the checked code writes goes nowhere
    (not into the caller's terminal), and an exception in ``fn`` scores ``default``."""
    pool = WorkerPool(max_workers=1)
    assert pool.call(os.getsid, (0,), 60.0) not in (None, os.getsid(0))
    assert pool.call(os.write, (2, b"worker-noise\n"), 60.0) == len(b"worker-noise\n")
    assert pool.call(int, ("not a number",), 60.0, default=-1) == -1
    assert pool.call(int, ("12",), 60.0, default=-1) == 12
    captured = capfd.readouterr()
    assert "worker-noise" not in captured.err + captured.out


def test_worker_start_up_is_bounded(tmp_path, monkeypatch):
    """A worker whose preload import hangs is killed after STARTUP_TIMEOUT and reported, not waited for."""
    (tmp_path / "slow_preload_for_test.py").write_text("import time\ntime.sleep(6)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(worker_pool, "STARTUP_TIMEOUT", 0.5)
    with pytest.raises(TimeoutError):
        _Worker(("slow_preload_for_test",))
