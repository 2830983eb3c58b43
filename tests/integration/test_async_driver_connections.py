"""``await app.aenqueue(..., connection=conn)`` with a raw psycopg 3 ``AsyncConnection``, on real
PostgreSQL: the job is inserted in the caller's transaction, on the caller's loop; it exists only
once the caller commits (and a worker then finds and runs it by polling: the dispatcher is not
told, a driver connection has no commit hook), a rollback leaves nothing, and a connection on
another database (or closed, or on a SQLite store) is refused naming ``connection``, with nothing
written."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
import tether
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.entrypoints.requests import EnqueueRequest
from tether.entrypoints.service import Tether

from tests.conftest import wait_for
from tests.postgres_fixtures import DATABASE_URL, schema_name, temporary_app

LIBPQ_URL = DATABASE_URL.replace("postgresql+psycopg://", "postgresql://")
SCHEMA = schema_name("async_driver")


@pytest.fixture
def app() -> Iterator[Tether]:
    with temporary_app(SCHEMA) as app:
        yield app


def total(app: Tether) -> int:
    return sum(app.counts().values())


def record_notifications(app: Tether) -> list[list[int]]:
    heard: list[list[int]] = []
    notify = app.dispatcher.notify

    def recording(jobs: Sequence[Job]) -> None:
        heard.append([job.id for job in jobs])
        notify(jobs)

    app.dispatcher.notify = recording  # type: ignore[method-assign]
    return heard


@pytest.mark.postgres
def test_a_committed_job_exists_only_after_the_callers_commit_and_a_polling_worker_runs_it(app: Tether) -> None:
    heard = record_notifications(app)
    ran: list[dict] = []
    app.handler("orders.confirm")(ran.append)

    async def scenario() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(LIBPQ_URL) as conn:
            await conn.execute(f"CREATE TABLE {SCHEMA}.orders (id int PRIMARY KEY)")
            await conn.commit()
            await conn.execute(f"INSERT INTO {SCHEMA}.orders VALUES (42)")
            result = await app.aenqueue("orders.confirm", {"order": 42}, connection=conn)
            [batch] = await app.aenqueue_many([EnqueueRequest("orders.confirm", {"order": 43})], connection=conn)
            assert result.created and batch.created
            assert conn.info.transaction_status is TransactionStatus.INTRANS  # left open: the caller's to end
            assert await asyncio.to_thread(total, app) == 0  # not visible before the caller commits
            await conn.commit()
            return result.job.id, batch.job.id

    first, second = asyncio.run(scenario())
    assert app.get(first).payload == {"order": 42} and app.get(second).status is JobStatus.QUEUED
    with psycopg.connect(LIBPQ_URL) as check:
        assert check.execute(f"SELECT count(*) FROM {SCHEMA}.orders").fetchone() == (1,)
    assert heard == []  # no commit hook: nobody was told
    with app.worker(concurrency=2, max_wait=0.05, reap_interval=0.5):
        wait_for(lambda: app.get(first).status is JobStatus.COMPLETED and app.get(second).status is JobStatus.COMPLETED,
                 what="the polling worker to find and run both jobs")
    assert sorted(p["order"] for p in ran) == [42, 43]


@pytest.mark.postgres
def test_a_rollback_leaves_no_job_and_the_key_holds_within_the_transaction(app: Tether) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(LIBPQ_URL) as conn:
            first = await app.aenqueue("emails.send", {"n": 1}, idempotency_key="k", connection=conn)
            again = await app.aenqueue("emails.send", {"n": 2}, idempotency_key="k", connection=conn)
            assert first.created and not again.created and again.job.id == first.job.id
            await app.aenqueue_many([EnqueueRequest("emails.send", {"n": i}) for i in range(3)], connection=conn)
            await conn.rollback()
            assert await asyncio.to_thread(total, app) == 0
            # the same connection joins its next transaction too
            await app.aenqueue("emails.send", {"n": 3}, idempotency_key="k", connection=conn)
            await conn.rollback()

    asyncio.run(scenario())
    assert total(app) == 0 and app.find_by_key("k") is None


@pytest.mark.postgres
def test_a_connection_on_another_database_closed_or_for_a_sqlite_store_is_refused_with_nothing_written(
    app: Tether, tmp_path: Path
) -> None:
    async def scenario() -> None:
        other_url = LIBPQ_URL.rsplit("/", 1)[0] + "/postgres"
        async with await psycopg.AsyncConnection.connect(other_url) as other:
            with pytest.raises(ValidationError, match="connection: is on database 'postgres'") as caught:
                await app.aenqueue("emails.send", connection=other)
            assert caught.value.field == "connection"
            with pytest.raises(ValidationError, match="connection: is on database 'postgres'"):
                await app.aenqueue_many([EnqueueRequest("emails.send")], connection=other)
            assert other.info.transaction_status is TransactionStatus.INTRANS  # only the check ran there
            await other.rollback()
        closed = await psycopg.AsyncConnection.connect(LIBPQ_URL)
        await closed.close()
        with pytest.raises(ValidationError, match="connection: that psycopg AsyncConnection is closed"):
            await app.aenqueue("emails.send", connection=closed)
        with tether.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as sqlite_app:
            async with await psycopg.AsyncConnection.connect(LIBPQ_URL) as conn:
                with pytest.raises(ValidationError, match="connection: a psycopg AsyncConnection cannot reach"):
                    await sqlite_app.aenqueue("emails.send", connection=conn)
            assert sum(sqlite_app.counts().values()) == 0

    asyncio.run(scenario())
    assert total(app) == 0


@pytest.mark.postgres
def test_concurrent_tasks_each_joining_their_own_connection_store_every_job_once(app: Tether) -> None:
    async def one(n: int) -> int:
        async with await psycopg.AsyncConnection.connect(LIBPQ_URL, row_factory=dict_row) as conn:
            ids = []
            for i in range(5):
                ids.append((await app.aenqueue("emails.send", {"task": n, "i": i}, connection=conn)).job.id)
                await asyncio.sleep(0)  # let the other tasks interleave on their own connections
            if n % 2:
                await conn.rollback()
                return 0
            await conn.commit()
            assert len(set(ids)) == 5
            return len(ids)

    async def scenario() -> int:
        return sum(await asyncio.gather(*(one(n) for n in range(6))))

    committed = asyncio.run(scenario())
    jobs = app.list(limit=100)
    assert committed == 15 and len(jobs) == 15
    assert sorted((j.payload["task"], j.payload["i"]) for j in jobs) == sorted((n, i) for n in (0, 2, 4) for i in range(5))
