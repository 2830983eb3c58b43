"""Redis Streams dispatch survives the Redis server itself failing under a running worker pool: a
real ``redis-server`` restarted without persistence, and a literal ``FLUSHALL``.

The server is private (tests/throwaway_redis.py: a free port, ``--save "" --appendonly no``), so
the test can SIGKILL it or flush it without touching the shared Redis test server.  A real
worker pool (``tether.connect`` on this run's own PostgreSQL schema, or on a SQLite file) drains
jobs that a separate producer application (a dispatcher of its own, as a web process would have)
enqueues every 20 ms throughout.  Mid-run:

- **restart**: the server is SIGKILLed, stays down 1.5 s while jobs keep being enqueued, and is
  started again, empty, on the same port;
- **flushall**: ``FLUSHALL`` on the running server (streams, consumer group, queue registry and
  sweep markers all gone at once).

Expected: every job completed, its handler ran exactly once; the consumer group exists again
on the server (NOGROUP healed); a job enqueued afterwards is published and delivered through the
group to the worker's consumer (Redis dispatch is back, not just the sweep or the database
fallback).  After the restart the dispatchers said Redis "answers again" (they left their
degraded mode); a FLUSHALL is healed without any degraded mode at all (no "Redis ... failed"
warning), the group being recreated on the spot ("recreating" logged).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import tether
from tether.entrypoints.service import Tether

from tests.conftest import DATABASE_URL, service_unavailable, wait_for
from tests.executions import Executions
from tests.postgres_fixtures import schema_name, temporary_app
from tests.throwaway_redis import ThrowawayRedis, binaries_missing

pytestmark = pytest.mark.redis
#: Short dispatcher timings so a healed Redis is noticed within a fraction of a second.
REDIS_OPTIONS = {"block": 0.2, "claim_idle": 1.0, "sweep_interval": 0.5}
ENQUEUE_EVERY = 0.02  # seconds between two enqueues of the producer
DOWN_FOR = 1.5  # seconds the killed server stays down
RUN_ON = 1.0  # seconds the producer keeps enqueueing after the disruption
LOGGER = "tether.dispatch.redis"


@pytest.fixture
def redis_server() -> Iterator[ThrowawayRedis]:
    missing = binaries_missing()
    if missing:
        service_unavailable("redis-server", missing)
    server = ThrowawayRedis()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@contextmanager
def worker_and_producer(database: str, name: str, tmp_path: Path, redis_url: str) -> Iterator[tuple[Tether, Tether]]:
    """Two applications on one database and one Redis: the worker's and the producer's (each with
    a dispatcher of its own).  PostgreSQL: the schema ``schema_name(name)``, dropped afterwards."""
    options: dict[str, Any] = {"redis_url": redis_url, "redis_options": dict(REDIS_OPTIONS)}
    if database == "postgres":
        schema = schema_name(name)
        with temporary_app(schema, **options) as workers, tether.connect(DATABASE_URL, schema=schema, **options) as producer:
            yield workers, producer
    else:
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        with tether.connect(url, **options) as workers, tether.connect(url, **options) as producer:
            yield workers, producer


class Producer:
    """Enqueues a ``t.record`` job every :data:`ENQUEUE_EVERY` seconds until stopped."""

    def __init__(self, app: Tether) -> None:
        self.app = app
        self.ids: list[int] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(ENQUEUE_EVERY):
            try:
                self.ids.append(self.app.enqueue("t.record", {"n": n}).job.id)
            except Exception as exc:  # noqa: BLE001 - asserted empty by the test
                self.errors.append(exc)
            n += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def drain_through(disrupt: Callable[[], None], database: str, name: str, tmp_path: Path, server: ThrowawayRedis) -> int:
    """Run a pool and a producer, ``disrupt()`` Redis once 20 jobs ran, let the producer run on
    for :data:`RUN_ON` seconds, then wait for the drain and run one probe job.  Asserts every job
    (the probe too) ran exactly once, and that the probe reached the worker through the stream
    and consumer group on ``server``.  Returns how many jobs were enqueued during ``disrupt()``."""
    executions = Executions()
    with worker_and_producer(database, name, tmp_path, server.url()) as (workers, producer_app):

        @workers.handler("t.record")
        def record(payload: dict[str, Any], ctx: Any) -> None:
            executions.record(ctx.job.id)

        pool = workers.worker(concurrency=4, max_wait=0.2)
        pool.start()
        producer = Producer(producer_app)
        try:
            wait_for(lambda: len(executions) >= 20, timeout=30, what="20 jobs to run before the disruption")
            with server.client() as client:
                assert client.keys(), "Redis was not in use before the disruption"
            before = len(producer.ids)
            disrupt()
            during = len(producer.ids) - before
            time.sleep(RUN_ON)
            producer.stop()
            job_ids = set(producer.ids)
            executions.wait_for_drain(workers, len(job_ids), timeout=60)
            executions.assert_each_ran_once(workers, job_ids)

            # Redis dispatch is back: a new job is published, read by the worker's consumer in the
            # recreated group, and runs (the pool is idle: no completion flush can lease it).
            probe = producer_app.enqueue("t.record", {"probe": True}).job
            wait_for(lambda: len(executions) > len(job_ids), timeout=30, what="the probe job to run")
            dispatcher: Any = workers.dispatcher
            stream = dispatcher.keys.stream("default")
            with server.client() as client:
                entries = [entry for entry, fields in client.xrange(stream) if fields.get("id") == str(probe.id)]
                assert entries, "the probe job was never published to its stream"
                groups = {g["name"]: g for g in client.xinfo_groups(stream)}
                assert dispatcher.group in groups, f"consumer group {dispatcher.group!r} not recreated: {groups}"

                # Read through the group by the worker's consumer.  Under load the pool may still
                # have leased the probe from the database (a lease round that began while Redis
                # was down), so wait for the group's read rather than sample it once.
                def read_through_group() -> bool:
                    group = {g["name"]: g for g in client.xinfo_groups(stream)}[dispatcher.group]
                    return entry_key(group["last-delivered-id"]) >= entry_key(entries[0])

                wait_for(read_through_group, timeout=30, what="the group to read the probe's entry")
                consumers = {c["name"] for c in client.xinfo_consumers(stream, dispatcher.group)}
            assert dispatcher.consumer in consumers, consumers  # by the worker's consumer
        finally:
            producer.stop()
            pool.stop(drain_timeout=5)
        assert producer.errors == []  # enqueue never failed, Redis or not
        executions.assert_each_ran_once(workers, {*job_ids, probe.id})
    return during


def entry_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id ``<ms>-<seq>`` as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


@pytest.fixture
def dispatch_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """``caplog`` recording the dispatchers' log from INFO up."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    return caplog


def logged(caplog: pytest.LogCaptureFixture, fragment: str) -> bool:
    """Whether a dispatcher logged a line containing ``fragment``."""
    return any(fragment in r.getMessage() for r in caplog.records if r.name == LOGGER)


def redis_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The dispatchers' warnings that Redis failed or was down (their degraded mode)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno >= logging.WARNING and "Redis at" in r.getMessage()
    ]


DATABASES = [pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"]


@pytest.mark.slow
@pytest.mark.parametrize("database", DATABASES)
def test_redis_killed_and_restarted_empty_on_the_same_port(
    database: str, redis_server: ThrowawayRedis, tmp_path: Path, dispatch_log: pytest.LogCaptureFixture
) -> None:

    def restart() -> None:
        redis_server.kill()
        time.sleep(DOWN_FOR)  # jobs keep being enqueued meanwhile
        redis_server.start()  # a new process, empty, on the same port

    during = drain_through(restart, database, "redisrestart", tmp_path, redis_server)
    assert during > 0  # jobs were enqueued while Redis was down
    assert redis_warnings(dispatch_log)  # the outage was felt...
    assert logged(dispatch_log, "answers again")  # ...and the dispatchers left their degraded mode


@pytest.mark.parametrize("database", DATABASES)
def test_flushall_under_running_workers(
    database: str, redis_server: ThrowawayRedis, tmp_path: Path, dispatch_log: pytest.LogCaptureFixture
) -> None:

    def flushall() -> None:
        with redis_server.client() as client:
            client.flushall()

    drain_through(flushall, database, "redisflushall", tmp_path, redis_server)
    assert logged(dispatch_log, "recreating")  # NOGROUP (or UNBLOCKED) met and healed
    assert redis_warnings(dispatch_log) == []  # without a failure: no backoff, no degraded mode
