"""Graceful shutdown (case C16), scaled down: drain deadline 1 s instead of 10 s.

J1's handler sleeps 30 s cooperatively (ctx.sleep), J2's takes 0.3 s; SIGTERM arrives while both
run; J3 is enqueued after it.  Expected: no lease after the signal (J3 stays queued), J2
completes, J1 is released at the drain deadline (queued, lease cleared, attempt given back, never
dead or completed) so another worker can lease it at once, and the process exits shortly after.
One test sends a real SIGTERM to this process (run() on the main thread), one to a real child
process and waits for it to exit.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.job import Job, JobStatus
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether
from tether.entrypoints.worker import WorkerPool

from tests.conftest import wait_for


def make_app() -> Tether:
    repo, clock = InMemoryJobRepository(), SystemClock()
    return Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)


class StuckPool(NamedTuple):
    """One job whose handler sets ``started`` and then sleeps 60 s cooperatively, and a one-thread
    pool (not started) with a long drain deadline (120 s unless given): only a second stop
    request ends its drain early."""

    app: Tether
    job: Job
    pool: WorkerPool
    started: threading.Event


def stuck_pool(drain_timeout: float = 120) -> StuckPool:
    app = make_app()
    started = threading.Event()

    @app.handler("stuck")
    def stuck(payload: dict, ctx: JobContext) -> None:
        started.set()
        ctx.sleep(60)

    job = app.enqueue("stuck", {}).job
    return StuckPool(app, job, app.worker(concurrency=1, lease_timeout=30, drain_timeout=drain_timeout, reap_interval=30), started)


def released_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "released back to its queue" in record.getMessage()]


def assert_drain_abandoned(caplog: pytest.LogCaptureFixture, app: Tether, job: Job, stats: Any, *, by: str) -> list[str]:
    """The stuck job went back to its queue at once, and its release line says the drain was
    abandoned ``by`` ("second SIGTERM"), not that its deadline passed; returns every log message."""
    assert app.get(job.id).status is JobStatus.QUEUED
    assert stats.released == 1
    released = released_lines(caplog)
    assert len(released) == 1 and f"{by}: drain abandoned; job {job.id} cancelled" in released[0], released
    return [record.getMessage() for record in caplog.records]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_c16_sigterm_drains_then_releases_under_the_fence() -> None:
    app = make_app()
    seen: dict[str, object] = {}
    started = {"j1": threading.Event(), "j2": threading.Event()}

    @app.handler("long")
    def long_job(payload: dict, ctx: JobContext) -> None:
        started["j1"].set()
        seen["j1_slept_fully"] = ctx.sleep(30)
        seen["j1_cancelled"] = ctx.cancelled

    @app.handler("short")
    def short_job(payload: dict, ctx: JobContext) -> None:
        started["j2"].set()
        time.sleep(0.3)
        seen["j2_done"] = True

    j1 = app.enqueue("long", {}).job
    j2 = app.enqueue("short", {}).job
    pool = app.worker(concurrency=3, lease_timeout=30, drain_timeout=1.0, reap_interval=30)
    j3_holder: dict[str, int] = {}
    signalled: dict[str, float] = {}

    def operator() -> None:
        started["j1"].wait(20)
        started["j2"].wait(20)
        signalled["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: pool.stopping, what="the stop to begin")
        j3_holder["id"] = app.enqueue("short", {"late": True}).job.id

    previous = signal.getsignal(signal.SIGTERM)
    helper = threading.Thread(target=operator)
    helper.start()
    stats = pool.run(install_signal_handlers=True)
    returned = time.monotonic()
    helper.join(10)
    assert signal.getsignal(signal.SIGTERM) == previous  # handlers restored

    final1, final2, final3 = app.get(j1.id), app.get(j2.id), app.get(j3_holder["id"])
    assert (final2.status, final2.attempts) == (JobStatus.COMPLETED, 1)
    assert (final1.status, final1.attempts, final1.last_error) == (JobStatus.QUEUED, 0, None)  # not a failure
    assert (final1.lease_token, final1.leased_by, final1.lease_expires_at, final1.finished_at) == (None, None, None, None)
    assert (final3.status, final3.attempts) == (JobStatus.QUEUED, 0)
    assert (stats.completed, stats.released, stats.dead, stats.lease_lost) == (1, 1, 0, 0)
    # run() returned after the 1 s drain deadline, not after J1's 30 s
    assert returned - signalled["at"] >= 1.0
    wait_for(lambda: "j1_cancelled" in seen, what="J1's handler to see the cancellation")
    assert seen == {"j1_slept_fully": False, "j1_cancelled": True, "j2_done": True}
    # another worker can lease J1 at once (due now, lease cleared)
    leased = app.repository.lease(queues=None, worker_id="other", now=app.clock.now(), lease_timeout=30, limit=5)
    assert sorted(j.id for j in leased) == sorted([j1.id, final3.id])
    assert {j.id: j.attempts for j in leased}[j1.id] == 1


def test_stop_before_the_deadline_when_everything_finishes() -> None:
    app = make_app()

    @app.handler("quick")
    def quick(payload: dict, ctx: JobContext) -> None:
        ctx.sleep(0.2)

    job = app.enqueue("quick", {}).job
    pool = app.worker(concurrency=1, lease_timeout=30, drain_timeout=10, reap_interval=30)
    pool.start()
    wait_for(lambda: app.get(job.id).status is JobStatus.RUNNING, what="the lease")
    stats = pool.stop()
    assert app.get(job.id).status is JobStatus.COMPLETED
    assert (stats.completed, stats.released) == (1, 0)


def test_a_second_signal_ends_the_drain_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tether.worker")
    app, job, pool, gate = stuck_pool()
    result: list[object] = []
    runner = threading.Thread(target=lambda: result.append(pool.run(install_signal_handlers=False)))
    runner.start()
    gate.wait(20)
    pool.request_stop()
    time.sleep(0.3)
    assert runner.is_alive()  # draining: up to 120 s
    pool.request_stop()  # the second request cuts the drain
    runner.join(20)
    assert not runner.is_alive()
    assert app.get(job.id).status is JobStatus.QUEUED
    assert result[0].released == 1  # type: ignore[attr-defined]
    [released] = released_lines(caplog)
    assert "second stop request: drain abandoned" in released


CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from tether.adapters.clock import SystemClock
    from tether.adapters.memory import InMemoryJobRepository
    from tether.adapters.polling import PollingDispatcher
    from tether.entrypoints.service import Tether

    repo, clock = InMemoryJobRepository(), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)
    running = set()

    @app.handler("long")
    def long_job(payload, ctx):
        running.add("j1")
        ctx.sleep(30)

    @app.handler("stubborn")
    def stubborn(payload):
        running.add("j4")
        time.sleep(60)   # ignores cancellation: must not keep the process alive

    @app.handler("short")
    def short_job(payload):
        running.add("j2")
        time.sleep(0.3)

    ids = {"j1": app.enqueue("long", {}).job.id, "j2": app.enqueue("short", {}).job.id,
           "j4": app.enqueue("stubborn", {}).job.id}
    pool = app.worker(concurrency=4, lease_timeout=30, drain_timeout=1.0, reap_interval=30)

    def announce():
        while running != {"j1", "j2", "j4"}:
            time.sleep(0.01)
        print("RUNNING", flush=True)
        while not pool.stopping:
            time.sleep(0.01)
        ids["j3"] = app.enqueue("short", {"late": True}).job.id

    threading.Thread(target=announce, daemon=True).start()
    stats = pool.run()
    out = {name: [app.get(i).status.value, app.get(i).attempts, app.get(i).lease_token] for name, i in ids.items()}
    print("RESULT " + json.dumps({"jobs": out, "released": stats.released, "completed": stats.completed}), flush=True)
    """
)


@pytest.mark.slow
def test_c16_a_real_process_exits_shortly_after_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "RUNNING", proc.stderr.read() if proc.stderr else line
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)  # J1 would sleep 30 s and J4 60 s
        exited = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    result = json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    jobs = result["jobs"]
    assert jobs["j2"] == ["completed", 1, None]
    assert jobs["j1"] == ["queued", 0, None]
    assert jobs["j4"] == ["queued", 0, None]
    assert jobs["j3"] == ["queued", 0, None]
    assert (result["released"], result["completed"]) == (2, 1)
    assert exited - sent >= 1.0  # it did wait for the drain deadline
    assert "drain deadline passed (1 s); job" in err


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_second_sigint_during_the_drain_releases_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tether.worker")
    app, job, pool, gate = stuck_pool()
    observed: dict[str, object] = {}

    def operator() -> None:
        gate.wait(20)
        os.kill(os.getpid(), signal.SIGINT)
        wait_for(lambda: pool.stopping, what="the drain to begin")
        time.sleep(0.3)
        observed["during_drain"] = app.get(job.id).status
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=operator)
    helper.start()
    stats = pool.run()  # a KeyboardInterrupt here would fail the test: SIGINT is handled
    helper.join(10)
    assert observed["during_drain"] is JobStatus.RUNNING
    messages = assert_drain_abandoned(caplog, app, job, stats, by="second SIGINT")
    assert any(m.endswith("stop requested by SIGINT (a second one abandons the drain)") for m in messages), messages


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_second_sigterm_before_the_drain_began_still_abandons_it(caplog: pytest.LogCaptureFixture) -> None:
    """Two quick SIGTERMs: the second lands after the first ended run()'s wait but before stop()
    starts the drain.  It is a second signal all the same: the drain is abandoned at once and the
    log says so (it used to be swallowed: a full drain, then "drain deadline passed")."""
    caplog.set_level(logging.INFO, logger="tether.worker")
    app, job, pool, gate = stuck_pool(drain_timeout=10)  # unfixed, the drain would run its 10 s

    class SecondSigterm(logging.Handler):
        """Raises the second SIGTERM on the main thread as run() logs the first, i.e. exactly in
        the window between the first signal and the drain (raise_signal runs the handler at once)."""

        def emit(self, record: logging.LogRecord) -> None:
            if "stop requested by SIGTERM" in record.getMessage():
                signal.raise_signal(signal.SIGTERM)

    hook = SecondSigterm()
    logging.getLogger("tether.worker").addHandler(hook)
    helper = threading.Thread(target=lambda: (gate.wait(20), os.kill(os.getpid(), signal.SIGTERM)))
    helper.start()
    try:
        stats = pool.run()
    finally:
        logging.getLogger("tether.worker").removeHandler(hook)
        helper.join(10)
    messages = assert_drain_abandoned(caplog, app, job, stats, by="second SIGTERM")
    assert any(m.endswith("second SIGTERM: drain abandoned; releasing 1 running job(s) now") for m in messages), messages
