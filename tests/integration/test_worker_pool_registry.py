"""Worker pools in the worker registry, with real threads (and a real killed process).

A running pool is listed by ``app.workers()`` with its settings and refreshes its entry at each
heartbeat; a clean stop removes it; a pool whose process was killed stays listed as gone, and its
job stays running until its own lease expires (the registry never takes a job back, case C04).
Intervals are scaled down; waits are bounded and nothing asserts a speed.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import tether
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import ConfigurationError, StorageUnavailable
from tether.domain.job import JobStatus
from tether.domain.workers import PRUNE_AFTER, WorkerEntry
from tether.entrypoints.service import Tether
from tether.entrypoints.worker.presence import Presence, dispatcher_kind
from tether.testing.contract.worker_registry import entry

from tests.conftest import wait_for
from tests.postgres_fixtures import schema_name, temporary_app

_schemas = itertools.count()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tether]:
    if request.param == "postgres":
        with temporary_app(schema_name(f"wreg{next(_schemas)}"), poll_interval=0.05) as pg_app:
            yield pg_app
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'jobs.db'}"
    with tether.connect(url, poll_interval=0.05) as local_app:
        yield local_app


def only(app: Tether, worker_id: str) -> WorkerEntry | None:
    return next((w for w in app.workers() if w.worker_id == worker_id), None)


def test_a_running_pool_is_listed_refreshes_its_entry_and_leaves_at_a_clean_stop(app: Tether) -> None:
    done = threading.Event()

    @app.handler("reports.build")
    def build(payload: dict) -> None:
        done.set()

    pool = app.worker(concurrency=2, queues=["default", "emails"], lease_timeout=3.0, heartbeat_interval=0.1,
                      worker_id="pool-a", reap_interval=0.5)
    assert app.workers() == []
    pool.start()
    try:
        first = only(app, "pool-a")  # recorded by start() itself
        assert first is not None
        assert (first.host, first.pid, first.queues, first.job_types, first.concurrency) == (
            socket.gethostname(), os.getpid(), ("default", "emails"), ("reports.build",), 2)
        assert (first.version, first.dispatcher, first.heartbeat_interval, first.gone) == (
            tether.__version__, "polling", 0.1, False)
        assert first.started_at <= first.last_seen_at
        wait_for(lambda: (only(app, "pool-a") or first).last_seen_at > first.last_seen_at, what="a refresh")

        @app.handler("emails.send")  # registered while the pool runs: listed at the next refresh
        def send(payload: dict) -> None:
            return None

        wait_for(lambda: (only(app, "pool-a") or first).job_types == ("emails.send", "reports.build"), what="new type")
        app.enqueue("reports.build")
        assert done.wait(20)
        again = only(app, "pool-a")
        assert again is not None and again.started_at == first.started_at
    finally:
        pool.stop()
    assert app.workers() == []


def test_two_pools_are_listed_apart(app: Tether) -> None:
    with app.worker(concurrency=1, heartbeat_interval=0.2, lease_timeout=2.0, worker_id="p-1"), \
            app.worker(concurrency=3, queues=["emails"], heartbeat_interval=0.2, lease_timeout=2.0, worker_id="p-2"):
        listed = {w.worker_id: (w.concurrency, w.queues) for w in app.workers()}
        assert listed == {"p-1": (1, None), "p-2": (3, ("emails",))}
    assert app.workers() == []


CHILD = textwrap.dedent(
    """
    import sys, time
    import tether

    app = tether.connect(sys.argv[1], poll_interval=0.05)

    @app.handler("hang")
    def hang(payload, ctx):
        print("RUNNING", flush=True)
        ctx.sleep(120)   # the parent kills this process meanwhile

    app.worker(concurrency=1, lease_timeout=60, heartbeat_interval=0.2, worker_id="doomed").run()
    """
)


@pytest.mark.slow
def test_a_killed_pool_stays_listed_as_gone_and_its_job_waits_for_its_own_lease(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    with tether.connect(url) as app:
        job = app.enqueue("hang").job
        child = subprocess.Popen([sys.executable, str(script), url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "RUNNING"
            wait_for(lambda: only(app, "doomed") is not None, what="the child's entry")
            assert re.fullmatch(r".* \(worker doomed is alive, last seen \d+ s ago\)", app.explain(job.id).verdict)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=10)
        wait_for(lambda: any(w.gone for w in app.workers()), timeout=30, what="the entry to turn gone")
        [gone] = app.workers()
        assert (gone.worker_id, gone.status, gone.job_types) == ("doomed", "gone", ("hang",))
        explanation = app.explain(job.id)
        assert explanation.reason == "running" and explanation.fact("worker_status") == "gone"
        assert re.fullmatch(r"running on worker doomed since .* UTC, lease until .* UTC \(worker doomed is gone, "
                            r"last seen \d+ s ago\)", explanation.verdict), explanation.verdict
        assert app.reap() == []  # a gone worker is no reason to take the job back: its own lease decides
        assert app.get(job.id).status is JobStatus.RUNNING


class UnwritableRegistry(InMemoryJobRepository):
    """A memory repository whose worker registry cannot be written."""

    def record_worker(self, entry: WorkerEntry) -> None:
        raise StorageUnavailable("registry: the store is read-only today")


def test_a_registry_that_cannot_be_written_never_stops_the_pool(caplog: pytest.LogCaptureFixture) -> None:
    repo = UnwritableRegistry()
    clock = tether.connect("memory://").clock
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)
    ran: list[int] = []

    @app.handler("work")
    def work(payload: dict) -> None:
        ran.append(payload["n"])

    for n in range(5):
        app.enqueue("work", {"n": n})
    with caplog.at_level(logging.WARNING, logger="tether.worker"):
        app.worker(concurrency=2, heartbeat_interval=0.05, lease_timeout=1.0, reap_interval=0.2).run(
            stop_when_idle=True, install_signal_handlers=False)
    assert sorted(ran) == [0, 1, 2, 3, 4]
    assert app.workers() == []
    assert "could not refresh its worker registry entry (StorageUnavailable: registry: the store is read-only today)" in caplog.text


def test_an_app_without_a_registry_says_so_and_explains_without_workers() -> None:
    app = tether.connect("memory://")
    app.registry = None
    with pytest.raises(ConfigurationError, match="workers: InMemoryJobRepository keeps no worker registry"):
        app.workers()
    job = app.enqueue("reports.build").job
    assert app.explain(job.id).verdict.startswith("due since ")  # not "no live worker ...": nobody knows
    assert app.explain(job.id).fact("live_workers") is None
    running, release = threading.Event(), threading.Event()

    @app.handler("reports.build")
    def build(payload: dict) -> None:
        running.set()
        release.wait(20)

    with app.worker(concurrency=1, heartbeat_interval=0.05, lease_timeout=2.0, worker_id="unlisted"):
        assert running.wait(20)
        assert app.explain(job.id).verdict.endswith(" UTC")  # nothing said about the worker
        assert app.explain(job.id).fact("worker_status") is None
        assert app.repository.list_workers(now=app.clock.now()) == []  # type: ignore[attr-defined]
        release.set()


# -- one pool's presence, with a fake clock ------------------------------------------------------------
def presence(registry: InMemoryJobRepository, clock: FakeClock) -> Presence:
    from tether.adapters.log_limits import RateLimitedLog

    repo = InMemoryJobRepository()
    return Presence(
        registry=registry, clock=clock, worker_id="me", queues=None, handlers={"b": None, "a": None}, concurrency=4,
        heartbeat_interval=1.0, dispatcher=PollingDispatcher(repo, clock), ratelog=RateLimitedLog(logging.getLogger("t")),
    )


def test_presence_prunes_stale_entries_at_most_once_per_interval_and_writes_nothing_after_withdraw() -> None:
    clock = FakeClock()
    registry = InMemoryJobRepository()
    stale = clock.now() - PRUNE_AFTER - timedelta(seconds=1)
    registry.record_worker(entry(clock, "stale-1", started_at=stale, last_seen_at=stale))
    registry.record_worker(entry(clock, "recent", started_at=stale, last_seen_at=clock.now() - PRUNE_AFTER))
    me = presence(registry, clock)
    assert me.announce() is True  # records, and prunes on its first write
    assert [w.worker_id for w in registry.list_workers(now=clock.now())] == ["recent", "me"]
    registry.record_worker(entry(clock, "stale-2", started_at=stale, last_seen_at=stale))
    clock.advance(1)
    assert me.refresh_once() is True  # the next prune waits for PRUNE_EVERY
    listed = {w.worker_id: w for w in registry.list_workers(now=clock.now())}
    assert set(listed) == {"recent", "me", "stale-2"}
    assert listed["me"].last_seen_at == clock.now() and listed["me"].started_at == clock.now() - timedelta(seconds=1)
    assert (listed["me"].job_types, listed["me"].dispatcher) == (("a", "b"), "polling")
    assert me.withdraw() is True
    assert me.refresh_once() is False and me.withdraw() is False
    assert "me" not in {w.worker_id for w in registry.list_workers(now=clock.now())}


def test_dispatcher_kind_names_the_dispatcher() -> None:
    repo = InMemoryJobRepository()

    class Custom(PollingDispatcher):
        kind = ""

    assert dispatcher_kind(PollingDispatcher(repo, FakeClock())) == "polling"
    assert dispatcher_kind(Custom(repo, FakeClock())) == "Custom"
