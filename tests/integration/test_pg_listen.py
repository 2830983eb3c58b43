"""PostgreSQL LISTEN/NOTIFY wake-ups: idle workers start jobs long before their poll, delayed and
snoozed jobs near their due time, a killed listening connection comes back with nothing stranded,
schemas keep their own channels, and a notification leaves only with its transaction's commit.

The worker polls every 5 s from the start (``min_poll_interval = poll_interval = 5``) and the
producer is a separate app (its own dispatcher), so only a notification through PostgreSQL can
start a job sooner.  Bounds are generous (1 s against a 5 s poll); nothing asserts a speed beyond that.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Self

import psycopg
import pytest
import tether
from tether.adapters.clock import SystemClock
from tether.adapters.pg_notify import ListeningDispatcher, PgListener
from tether.adapters.polling import PollingDispatcher
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.adapters.sqlalchemy.pg_wakeups import channel_name
from tether.entrypoints.service import Tether
from tether.entrypoints.settings import InvalidSetting, Settings

from tests.conftest import DATABASE_URL, wait_for
from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository

pytestmark = pytest.mark.postgres

POLL = 5.0
#: A job must start within this many seconds of its commit or due time (the poll is 5 s).
BOUND = 1.0


def connector(repository: PostgresJobRepository, gate: threading.Event | None = None) -> Callable[[], Any]:
    """Opens psycopg connections to the repository's database; while ``gate`` is clear, fails as a
    down server would."""
    args, params = repository.engine.dialect.create_connect_args(repository.engine.url)

    def connect() -> Any:
        if gate is not None and not gate.is_set():
            raise psycopg.OperationalError("test: the server is unreachable")
        return psycopg.connect(*args, **{**params, "autocommit": True, "application_name": "tether-listen-test"})

    return connect


@pytest.fixture(scope="module")
def worker_repository() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("listen")) as repository:
        yield repository


@pytest.fixture
def producer(worker_repository: PostgresJobRepository) -> Iterator[Tether]:
    empty_tables(worker_repository)
    app = tether.connect(DATABASE_URL, schema=worker_repository.schema, listen=True, poll_interval=POLL)
    yield app
    app.close()


class Worker:
    """A one-thread worker pool on a ListeningDispatcher polling every 5 s; records handler starts."""

    def __init__(self, repository: PostgresJobRepository, gate: threading.Event | None = None) -> None:
        clock = SystemClock()
        channel = repository.enable_wakeups()
        polling = PollingDispatcher(repository, clock, poll_interval=POLL, min_poll_interval=POLL)
        self.dispatcher = ListeningDispatcher(polling, clock, connector(repository, gate), channel)
        self.app = Tether(repository, self.dispatcher, clock)
        self.starts: dict[str, list[float]] = {}
        self.snooze_once = True

        @self.app.handler("listen.record")
        def record(payload: dict[str, Any]) -> None:
            self.starts.setdefault(payload["name"], []).append(time.time())

        @self.app.handler("listen.snooze")
        def snooze(payload: dict[str, Any]) -> None:
            self.starts.setdefault(payload["name"], []).append(time.time())
            if len(self.starts[payload["name"]]) == 1:
                raise tether.Snooze(1.0)

        self.pool = self.app.worker(concurrency=1, max_wait=30.0, reap_interval=600)

    def __enter__(self) -> Self:
        self.pool.start()
        assert self.dispatcher.listener.wait_listening(10.0), "the worker never started listening"
        time.sleep(0.2)  # the pool's first lease query has run: it now waits out its 5 s poll
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.stop()
        self.dispatcher.close()

    def started(self, name: str, count: int = 1, timeout: float = 10.0) -> list[float]:
        wait_for(lambda: len(self.starts.get(name, [])) >= count, timeout=timeout, what=f"{name} started {count}x")
        return self.starts[name]


def test_connect_listen_wires_the_listening_dispatcher_and_a_schema_channel(producer: Tether) -> None:
    assert isinstance(producer.dispatcher, ListeningDispatcher)
    repository = producer.repository
    assert isinstance(repository, PostgresJobRepository)
    assert repository.wakeup_channel == channel_name(repository.schema)
    assert producer.dispatcher.listener.backend_pid is None  # a producer holds no LISTEN connection


def test_an_idle_worker_starts_each_job_well_before_its_poll(worker_repository: PostgresJobRepository,
                                                             producer: Tether) -> None:
    with Worker(worker_repository) as worker:
        for i in range(5):
            before = time.time()
            producer.enqueue("listen.record", {"name": f"j{i}"})
            [started] = worker.started(f"j{i}")
            assert started - before < BOUND
        # keyed, bulk and in-transaction enqueues notify too
        before = time.time()
        producer.enqueue("listen.record", {"name": "keyed"}, idempotency_key="listen-keyed")
        assert worker.started("keyed")[0] - before < BOUND
        before = time.time()
        producer.enqueue_many([tether.EnqueueRequest("listen.record", {"name": "bulk"})])
        assert worker.started("bulk")[0] - before < BOUND


def test_delayed_and_snoozed_jobs_start_near_their_due_time(worker_repository: PostgresJobRepository,
                                                            producer: Tether) -> None:
    with Worker(worker_repository) as worker:
        due = producer.clock.now() + timedelta(seconds=1.5)
        producer.enqueue("listen.record", {"name": "delayed"}, run_at=due)
        [started] = worker.started("delayed")
        assert due.timestamp() - 0.05 <= started < due.timestamp() + BOUND
        producer.enqueue("listen.snooze", {"name": "snoozed"})
        first, second = worker.started("snoozed", count=2)
        assert 1.0 - 0.05 <= second - first < 1.0 + BOUND  # Snooze(1.0): due one second after the first run


def test_a_killed_listening_connection_comes_back_and_no_job_is_stranded(
    worker_repository: PostgresJobRepository, producer: Tether, caplog: pytest.LogCaptureFixture
) -> None:
    gate = threading.Event()
    gate.set()
    caplog.set_level(logging.WARNING, logger="tether.adapters.pg_notify")
    with Worker(worker_repository, gate) as worker:
        listener = worker.dispatcher.listener
        pid = listener.backend_pid
        assert pid is not None
        gate.clear()  # reconnecting fails until the gate opens
        with worker_repository.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT pg_terminate_backend(%s)", (pid,)).scalar() is True
        wait_for(lambda: listener.backend_pid is None, timeout=5.0, what="the listener noticed the loss")
        producer.enqueue("listen.record", {"name": "while-down"})  # its NOTIFY reaches no one
        time.sleep(0.5)  # several failed reconnects: one warning for the whole episode
        gate.set()
        reopened = time.time()
        wait_for(lambda: listener.backend_pid is not None, timeout=10.0, what="LISTEN re-established")
        assert listener.backend_pid != pid
        # the poll after re-establishing finds the job committed meanwhile (not the 5 s poll)
        assert worker.started("while-down")[0] - reopened < 2.5  # reconnect backoff (< 1 s) and one poll
        before = time.time()
        producer.enqueue("listen.record", {"name": "after"})
        assert worker.started("after")[0] - before < BOUND
    lost = [r for r in caplog.records if "lost" in r.getMessage()]
    back = [r for r in caplog.records if "re-established" in r.getMessage()]
    assert len(lost) == 1 and len(back) == 1


def test_the_poll_after_reconnecting_finds_jobs_committed_while_no_one_listened(
    worker_repository: PostgresJobRepository, producer: Tether
) -> None:
    gate = threading.Event()
    gate.set()
    with Worker(worker_repository, gate) as worker:
        listener = worker.dispatcher.listener
        pid = listener.backend_pid
        gate.clear()
        with worker_repository.engine.connect() as conn:
            conn.exec_driver_sql("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for(lambda: listener.backend_pid is None, timeout=5.0, what="the listener noticed the loss")
        producer.enqueue("listen.record", {"name": "stranded?"})
        gate.set()
        reopened = time.time()
        wait_for(lambda: listener.connections == 2, timeout=10.0, what="LISTEN re-established")
        assert worker.started("stranded?")[0] - reopened < BOUND + 1.0  # backoff <= 0.1 s here, plus the poll


class Heard:
    """A PgListener on a channel, recording payloads."""

    def __init__(self, repository: PostgresJobRepository, channel: str) -> None:
        self.payloads: list[str] = []
        self.listener = PgListener(connector(repository), channel, on_notify=self.payloads.append,
                                   on_connected=lambda: None)
        self.listener.start()
        assert self.listener.wait_listening(10.0)

    def close(self) -> None:
        self.listener.stop()


def test_two_schemas_do_not_wake_each_other(worker_repository: PostgresJobRepository, producer: Tether) -> None:
    with temporary_repository(schema_name("listen_other")) as other_repository:
        other = tether.connect(DATABASE_URL, schema=other_repository.schema, listen=True)
        assert other.repository.wakeup_channel != producer.repository.wakeup_channel  # type: ignore[attr-defined]
        mine = Heard(worker_repository, channel_name(worker_repository.schema))
        theirs = Heard(other_repository, channel_name(other_repository.schema))
        try:
            other.enqueue("listen.record", {"name": "theirs"}, queue="q-theirs")
            producer.enqueue("listen.record", {"name": "mine"}, queue="q-mine")
            wait_for(lambda: mine.payloads and theirs.payloads, timeout=5.0, what="both notified")
            time.sleep(0.2)
            assert [p.split(" ", 1)[1] for p in mine.payloads] == ["q-mine"]
            assert [p.split(" ", 1)[1] for p in theirs.payloads] == ["q-theirs"]
        finally:
            mine.close()
            theirs.close()
            other.close()


def test_an_enqueue_in_the_callers_transaction_notifies_only_when_it_commits(
    worker_repository: PostgresJobRepository, producer: Tether
) -> None:
    heard = Heard(worker_repository, channel_name(worker_repository.schema))
    engine = producer.repository.engine  # type: ignore[attr-defined]
    try:
        with engine.connect() as conn:
            transaction = conn.begin()
            producer.enqueue("listen.record", {"name": "rolled-back"}, connection=conn)
            time.sleep(0.3)
            assert heard.payloads == []
            transaction.rollback()
        time.sleep(0.3)
        assert heard.payloads == []
        assert producer.list() == []
        due = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
        with engine.connect() as conn:
            transaction = conn.begin()
            producer.enqueue("listen.record", {"name": "committed"}, connection=conn, queue="tx", run_at=due)
            time.sleep(0.3)
            assert heard.payloads == []
            transaction.commit()
        wait_for(lambda: heard.payloads, timeout=5.0, what="the notification after commit")
        assert heard.payloads == [f"{due.timestamp():.6f} tx"]
    finally:
        heard.close()


def test_listen_needs_postgresql_and_no_redis(tmp_path: Any) -> None:
    with pytest.raises(InvalidSetting) as raised:
        tether.connect(f"sqlite:///{tmp_path}/x.db", listen=True)
    assert raised.value.setting == "listen"
    with pytest.raises(InvalidSetting) as raised:
        tether.connect(DATABASE_URL, redis_url="redis://127.0.0.1:6379/0", listen=True)
    assert raised.value.setting == "listen"
    with pytest.raises(InvalidSetting) as raised:
        Settings.load(environ={"TETHER_DATABASE_URL": DATABASE_URL, "TETHER_LISTEN": "maybe"})
    assert raised.value.setting == "listen"
    assert Settings.load(environ={"TETHER_DATABASE_URL": DATABASE_URL, "TETHER_LISTEN": "on"}).listen is True
    assert Settings().listen is False


def test_retries_snoozes_and_releases_notify_their_new_due_time(worker_repository: PostgresJobRepository,
                                                                 producer: Tether) -> None:
    worker_repository.enable_wakeups()
    heard = Heard(worker_repository, channel_name(worker_repository.schema))
    clock = SystemClock()
    try:
        job = producer.enqueue("listen.record", {"name": "r"}, queue="rq").job
        wait_for(lambda: len(heard.payloads) == 1, timeout=5.0, what="the enqueue's notification")

        def leased() -> Any:
            [held] = worker_repository.lease(queues=["rq"], worker_id="w", now=clock.now(), lease_timeout=60, limit=1)
            assert held.id == job.id
            return held

        retry_at = clock.now() + timedelta(seconds=30)
        held = leased()
        worker_repository.fail(held.id, held.lease_token, now=clock.now(), error="boom", retry_at=retry_at)
        snooze_until = retry_at + timedelta(seconds=30)
        held = worker_repository.lease(queues=["rq"], worker_id="w", now=retry_at, lease_timeout=60, limit=1)[0]
        worker_repository.snooze(held.id, held.lease_token, now=retry_at, until=snooze_until)
        held = worker_repository.lease(queues=["rq"], worker_id="w", now=snooze_until, lease_timeout=60, limit=1)[0]
        worker_repository.release(held.id, held.lease_token, now=snooze_until)
        stale = worker_repository.lease(queues=["rq"], worker_id="w", now=snooze_until, lease_timeout=60, limit=1)[0]
        with pytest.raises(tether.LeaseLost):  # a write whose fence fails notifies nothing
            worker_repository.release(stale.id, "not-the-token", now=snooze_until)
        wait_for(lambda: len(heard.payloads) == 4, timeout=5.0, what="three more notifications")
        time.sleep(0.2)
        assert heard.payloads[1:] == [f"{due.timestamp():.6f} rq" for due in (retry_at, snooze_until, snooze_until)]
    finally:
        heard.close()


def test_resuming_or_limiting_a_queue_wakes_listening_workers_of_another_process(
    worker_repository: PostgresJobRepository, producer: Tether
) -> None:
    # The producer is another repository (as another process would hold): its dispatcher cannot
    # reach the worker's, so only the NOTIFY of the queue's write can wake it before its 5 s poll.
    with Worker(worker_repository) as worker:
        producer.pause_queue("default")
        producer.enqueue("listen.record", {"name": "held"})
        time.sleep(0.5)  # the enqueue's NOTIFY woke the worker, which leased nothing
        assert "held" not in worker.starts
        before = time.time()
        producer.resume_queue("default")
        assert worker.started("held")[0] - before < BOUND
