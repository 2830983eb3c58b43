"""Queue pause and running limits with real worker pools on PostgreSQL.

- pause: once ``app.pause_queue`` returned, no job of the queue is leased (``leased_at`` of every
  job is before the pause returned), running jobs finish, and resume lets the rest run;
- resume wakes an idle worker at once: the pool polls every 5 s when idle, yet the job starts
  within 1 s of ``resume_queue`` (the pool is told through the dispatcher; without that the job
  waits for the next poll, about 4 s later);
- a running limit of 3 across 4 worker processes of 8 threads each: the handlers themselves count
  how many of them run at once (a row locked and updated at each start and end): the highest
  count is at most 3 and reaches 3.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import tether
from sqlalchemy import text
from tether.adapters.polling import PollingDispatcher
from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether

from tests.conftest import DATABASE_URL
from tests.postgres_fixtures import schema_name, temporary_app

pytestmark = pytest.mark.postgres


@pytest.fixture
def app() -> Iterator[Tether]:
    with temporary_app(schema_name("queue_controls"), poll_interval=5.0) as application:
        yield application


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def test_no_lease_from_a_paused_queue_after_the_pause_returned(app: Tether) -> None:
    started: list[int] = []

    @app.handler("mail.send", queue="mail")
    def send(payload: dict[str, int]) -> None:
        started.append(payload["n"])
        time.sleep(0.01)

    app.enqueue_many([tether.EnqueueRequest("mail.send", {"n": i}) for i in range(400)])
    pool = app.worker(concurrency=4, max_wait=0.2)
    pool.start()
    try:
        wait_for(lambda: len(started) >= 20, 30, "jobs to start")
        app.pause_queue("mail")
        paused_at = datetime.now(UTC)
        wait_for(lambda: app.counts("mail")[JobStatus.RUNNING] == 0, 30, "running jobs to finish")
        time.sleep(0.5)  # several lease rounds of the pool
        jobs = app.list(queue="mail", limit=10_000)
        leased_after = [j.id for j in jobs if j.leased_at is not None and j.leased_at > paused_at]
        finished_after = [j.id for j in jobs if j.status is JobStatus.COMPLETED and j.finished_at is not None
                          and j.finished_at > paused_at]
        assert leased_after == []
        counts = app.counts("mail")
        assert counts[JobStatus.QUEUED] > 0 and counts[JobStatus.RUNNING] == 0
        done_while_paused = counts[JobStatus.COMPLETED]
        time.sleep(0.3)
        assert app.counts("mail")[JobStatus.COMPLETED] == done_while_paused
        assert len(finished_after) <= 4 + 4  # at most the jobs running or prefetched when it was paused
        app.resume_queue("mail")
        wait_for(lambda: app.counts("mail")[JobStatus.COMPLETED] == 400, 60, "every job to complete after resume")
    finally:
        pool.stop()


def test_resume_wakes_an_idle_worker_at_once(app: Tether) -> None:
    # every idle wait of this pool lasts the full 5 s poll interval: only a wake-up is faster
    app = Tether(app.repository, PollingDispatcher(app.repository, app.clock, poll_interval=5.0, min_poll_interval=5.0),
                 app.clock)
    started = threading.Event()

    @app.handler("report.build", queue="reports")
    def build(payload: dict[str, int]) -> None:
        started.set()

    app.pause_queue("reports")
    pool = app.worker(concurrency=2, max_wait=10.0)
    pool.start()
    try:
        app.enqueue("report.build", {"n": 1})
        time.sleep(1.0)  # the pool found nothing it may lease: it waits 5 s before its next poll
        assert not started.is_set()
        resumed = time.monotonic()
        app.resume_queue("reports")
        assert started.wait(5.0), "the job did not start after resume"
        assert time.monotonic() - resumed < 1.0, "resume did not wake the idle worker"
    finally:
        pool.stop()


CHILD = textwrap.dedent(
    """
    import sys, time
    import tether
    from sqlalchemy import text

    url, schema = sys.argv[1], sys.argv[2]
    app = tether.connect(url, schema=schema, poll_interval=0.05, pool_size=12)
    engine = app.repository.engine

    def bump(delta):
        with engine.begin() as conn:
            conn.execute(text(
                f'UPDATE "{schema}".probe SET running = running + :d, peak = GREATEST(peak, running + :d)'
            ), {"d": delta})

    @app.handler("api.call", queue="api")
    def call(payload):
        bump(1)
        try:
            time.sleep(0.03)
        finally:
            bump(-1)

    print("READY", flush=True)
    app.worker(concurrency=8, max_wait=0.2).run(stop_when_idle=True)
    """
)


def test_a_limit_of_three_holds_across_four_processes_of_eight_threads(app: Tether, tmp_path: Path) -> None:
    schema = app.repository.schema  # type: ignore[attr-defined]
    engine = app.repository.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        conn.execute(text(f'CREATE TABLE "{schema}".probe (running int NOT NULL, peak int NOT NULL)'))
        conn.execute(text(f'INSERT INTO "{schema}".probe VALUES (0, 0)'))
    app.limit_queue("api", max_running=3)
    jobs = 120
    app.enqueue_many([tether.EnqueueRequest("api.call", {"n": i}, queue="api") for i in range(jobs)])
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen([sys.executable, str(script), DATABASE_URL, schema], stdout=subprocess.PIPE, env=env)
        for _ in range(4)
    ]
    try:
        for child in children:
            assert child.wait(timeout=120) == 0
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert app.counts("api")[JobStatus.COMPLETED] == jobs
    with engine.connect() as conn:
        running, peak = conn.execute(text(f'SELECT running, peak FROM "{schema}".probe')).one()
    assert running == 0
    assert peak == 3, f"the handlers saw at most {peak} of them running at once; the limit is 3"


@pytest.mark.parametrize("queues", [None, ["mail", "reports"]], ids=["all-queues", "named-queues"])
def test_run_until_idle_does_not_wait_for_a_paused_queue(queues: list[str] | None) -> None:
    from tether.adapters.clock import SystemClock
    from tether.adapters.memory import InMemoryJobRepository

    repo, clock = InMemoryJobRepository(), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)
    ran: list[str] = []
    app.register("mail.send", lambda payload: ran.append("mail"), queue="mail")
    app.register("report.build", lambda payload: ran.append("report"), queue="reports")
    held = app.enqueue("mail.send", {}).job
    app.enqueue("report.build", {})
    app.pause_queue("mail")
    result: list[object] = []
    runner = threading.Thread(
        target=lambda: result.append(app.worker(concurrency=2, queues=queues).run(stop_when_idle=True,
                                                                                  install_signal_handlers=False)),
        daemon=True,
    )
    runner.start()
    runner.join(10.0)
    assert not runner.is_alive(), "run(stop_when_idle=True) kept waiting for a job of a paused queue"
    assert ran == ["report"] and app.get(held.id).status is JobStatus.QUEUED


def test_a_rate_of_20_per_second_holds_over_5_seconds(app: Tether) -> None:
    """Two pools of eight threads on a queue limited to 20 starts per second: every fixed
    one-second window (whole seconds since the epoch, as documented) holds at most 20 starts, and
    the pools keep up with the rate."""
    app = Tether(app.repository, PollingDispatcher(app.repository, app.clock, poll_interval=0.05), app.clock)
    leased_at: list[float] = []
    lock = threading.Lock()

    @app.handler("api.call", queue="api")
    def call(payload: dict[str, int], ctx: tether.JobContext) -> None:
        with lock:
            assert ctx.job.leased_at is not None
            leased_at.append(ctx.job.leased_at.timestamp())

    app.rate_limit_queue("api", starts=20, per=1.0)
    app.enqueue_many([tether.EnqueueRequest("api.call", {"n": i}) for i in range(400)])
    pools = [app.worker(concurrency=8, max_wait=0.2) for _ in range(2)]
    for pool in pools:
        pool.start()
    try:
        time.sleep(5.5)
    finally:
        for pool in pools:
            pool.stop()
    per_window: dict[int, int] = {}
    for instant in leased_at:
        per_window[int(instant // 1)] = per_window.get(int(instant // 1), 0) + 1
    assert max(per_window.values()) <= 20, per_window
    full = sorted(per_window)[1:-1]  # the windows wholly inside the run
    assert full and all(per_window[w] == 20 for w in full), per_window
