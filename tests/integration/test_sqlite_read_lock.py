"""SQLite: a read through ``repository.engine`` takes no write lock, so it never holds up the queue.

Two real connections on one database file: a caller's read transaction (a handler's report query,
a ``Session``) held open on a connection from the repository's own engine, while the repository
enqueues, leases, heartbeats and completes in another thread.  The writes go through at once
(the repository waits 0.5 s for the lock here, so a held lock would show as seconds of retries and
then StorageUnavailable), and the read keeps its snapshot until it ends.  The repository's own
write transactions still begin with ``BEGIN IMMEDIATE``; everything else with a plain ``BEGIN``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.orm import Session
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import SqliteJobRepository
from tether.domain.job import JobStatus
from tether.domain.validation import prepare_job

#: Seconds a write may take while the read is open: far less than the lock wait plus retries.
PROMPT = 2.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[SqliteJobRepository]:
    repository = SqliteJobRepository.from_url(f"sqlite:///{tmp_path / 'jobs.db'}", busy_timeout=0.5)
    repository.retry_attempts = 3
    repository.create_schema()
    yield repository
    repository.close()


@pytest.fixture
def begins(repo: SqliteJobRepository) -> Iterator[list[str]]:
    """The BEGIN statements sent on the repository's engine, in order."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("BEGIN"):
            seen.append(statement)

    event.listen(repo.engine, "before_cursor_execute", record)
    yield seen
    event.remove(repo.engine, "before_cursor_execute", record)


def _in_another_thread(work: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``work`` in a thread; its result and how long it took (fails if it raised or is stuck)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            outcome["result"] = work()
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome["error"] = error
        outcome["took"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the write is still waiting for the lock after 30 s"
    assert "error" not in outcome, outcome["error"]
    return outcome["result"], outcome["took"]


def _count(conn: Any) -> int:
    return int(conn.execute(text("SELECT count(*) FROM tether_jobs")).scalar_one())


def test_an_open_read_on_the_engine_lets_the_queue_write(repo: SqliteJobRepository, clock: FakeClock) -> None:
    first = repo.enqueue(prepare_job("report.build", {"n": 1}, now=clock.now()), now=clock.now()).job
    with repo.engine.connect() as reader:
        assert _count(reader) == 1  # the read transaction is open from here on, holding its snapshot

        def queue_work() -> tuple[int, JobStatus, JobStatus]:
            second = repo.enqueue(prepare_job("report.build", {"n": 2}, now=clock.now()), now=clock.now()).job
            leased = repo.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60, limit=2)
            for job in leased:
                repo.heartbeat(job.id, job.lease_token or "", now=clock.now(), lease_timeout=60)
            done = [repo.complete(job.id, job.lease_token or "", now=clock.now()) for job in leased]
            return second.id, done[0].status, done[1].status

        (second_id, status_1, status_2), took = _in_another_thread(queue_work)
        assert took < PROMPT, f"the queue's writes took {took:.2f} s behind an open read"
        assert (status_1, status_2) == (JobStatus.COMPLETED, JobStatus.COMPLETED)
        assert _count(reader) == 1  # still its own snapshot: a real read transaction was open
        assert reader.in_transaction()
    assert [(j.id, j.status) for j in repo.list_jobs()] == [(first.id, JobStatus.COMPLETED), (second_id, JobStatus.COMPLETED)]


def test_an_open_session_read_lets_the_queue_write(repo: SqliteJobRepository, clock: FakeClock) -> None:
    with Session(repo.engine) as session:
        assert session.execute(select(func.count()).select_from(repo.table)).scalar_one() == 0
        result, took = _in_another_thread(
            lambda: repo.enqueue(prepare_job("report.build", {}, now=clock.now()), now=clock.now())
        )
        assert result.created and took < PROMPT
        assert session.execute(select(func.count()).select_from(repo.table)).scalar_one() == 0
    assert len(repo.list_jobs()) == 1


def test_the_repositorys_writes_begin_immediate_everything_else_begins_deferred(
    repo: SqliteJobRepository, clock: FakeClock, begins: list[str]
) -> None:
    job = repo.enqueue(prepare_job("t", {}, now=clock.now()), now=clock.now()).job
    [leased] = repo.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60)
    repo.complete(job.id, leased.lease_token or "", now=clock.now())
    with repo.transaction() as tx:
        repo.enqueue(prepare_job("t", {}, now=clock.now()), now=clock.now(), connection=tx)
    assert begins == ["BEGIN IMMEDIATE"] * 4
    begins.clear()
    repo.get(job.id)
    repo.list_jobs()
    with repo.engine.connect() as conn:
        _count(conn)
    with Session(repo.engine) as session:
        session.execute(select(repo.table.c.id)).all()
    with repo.engine.begin() as conn:
        _count(conn)
    assert begins == ["BEGIN"] * 5
    begins.clear()
    with repo.engine.connect().execution_options(tether_write=True) as conn:  # a caller asking for the lock
        _count(conn)
        conn.commit()
    assert begins == ["BEGIN IMMEDIATE"]
