"""The async API on PostgreSQL: native async I/O on the caller's loop (the sync pool is never
used), the caller's ``AsyncConnection``/``AsyncSession`` joined (published after commit, nothing
after a rollback), a connection on another database refused, and per-loop engines closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.entrypoints.requests import EnqueueRequest
from tether.entrypoints.service import Tether

from tests.postgres_fixtures import DATABASE_URL, schema_name, temporary_app

pytestmark = pytest.mark.postgres


@pytest.fixture
def app() -> Iterator[Tether]:
    with temporary_app(schema_name("async_pg"), pool_size=4) as app:
        yield app


def record_notifications(app: Tether) -> tuple[list[list[int]], threading.Event]:
    heard: list[list[int]] = []
    event_ = threading.Event()
    notify = app.dispatcher.notify

    def recording(jobs: Sequence[Job]) -> None:
        heard.append([job.id for job in jobs])
        notify(jobs)
        event_.set()

    app.dispatcher.notify = recording  # type: ignore[method-assign]
    return heard, event_


def test_the_async_api_never_uses_the_sync_pool(app: Tether) -> None:
    checkouts: list[str] = []
    engine = app.repository.engine  # type: ignore[attr-defined]
    event.listen(engine, "checkout", lambda *args: checkouts.append(threading.current_thread().name))

    async def scenario() -> None:
        job = (await app.aenqueue("a", {"n": 1})).job
        await app.aenqueue("a", idempotency_key="k")
        await app.aenqueue_many([EnqueueRequest("b"), EnqueueRequest("b", idempotency_key="k")])
        await app.aget(job.id)
        await app.alist(status="queued")
        await app.acounts()
        await app.afind_by_key("k")
        await app.acancel(job.id)
        await app.aretry(job.id)
        async with app.atransaction() as tx:
            await app.aenqueue("c", connection=tx)

    asyncio.run(scenario())
    assert checkouts == []
    assert app.counts()[JobStatus.QUEUED] == 4


def test_a_callers_async_connection_is_joined_published_after_commit_and_rolled_back_with_it(app: Tether) -> None:
    heard, notified = record_notifications(app)
    schema = app.repository.schema  # type: ignore[attr-defined]

    async def scenario() -> tuple[int, list[list[int]]]:
        engine = create_async_engine(DATABASE_URL)
        try:
            async with engine.connect() as conn:
                trans = await conn.begin()
                await app.aenqueue("rolled.back", connection=conn)
                await trans.rollback()
            async with engine.connect() as conn, conn.begin():
                await conn.exec_driver_sql(f'SELECT count(*) FROM "{schema}".tether_jobs')
                job = (await app.aenqueue("kept", {"x": 1}, connection=conn)).job
                await asyncio.sleep(0.05)
                before_commit = list(heard)
            return job.id, before_commit
        finally:
            await engine.dispose()

    job_id, before_commit = asyncio.run(scenario())
    assert before_commit == []
    assert notified.wait(10) and heard == [[job_id]]
    assert [job.job_type for job in app.list()] == ["kept"]


def test_a_callers_async_session_is_joined(app: Tether) -> None:
    heard, notified = record_notifications(app)

    async def scenario() -> int:
        engine = create_async_engine(DATABASE_URL)
        try:
            async with AsyncSession(engine) as session, session.begin():
                await app.aenqueue("session.rolled.back", connection=session)
                await session.rollback()
            async with AsyncSession(engine) as session, session.begin():
                results = await app.aenqueue_many([EnqueueRequest("s1"), EnqueueRequest("s2")], connection=session)
                assert heard == []
            return results[0].job.id
        finally:
            await engine.dispose()

    first = asyncio.run(scenario())
    assert notified.wait(10) and heard == [[first, first + 1]]
    assert sorted(job.job_type for job in app.list()) == ["s1", "s2"]


def test_an_async_connection_on_another_database_is_refused_and_nothing_is_written(app: Tether) -> None:
    other = make_url(DATABASE_URL).set(database="postgres")

    async def scenario() -> None:
        engine = create_async_engine(other)
        try:
            async with engine.begin() as conn:
                with pytest.raises(ValidationError) as info:
                    await app.aenqueue("x", connection=conn)
                assert info.value.field == "connection"
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert app.counts()[JobStatus.QUEUED] == 0
    with pytest.raises(ValidationError) as info:
        asyncio.run(app.aenqueue("x", connection="not a connection"))
    assert info.value.field == "connection"


def test_engines_are_per_loop_and_aclose_releases_the_running_loops(app: Tether) -> None:
    access: Any = app.async_access

    async def engine_id() -> int:
        await app.acounts()
        return id(access.engine())

    asyncio.run(engine_id())
    asyncio.run(engine_id())
    assert len(access._engines) == 1  # the first loop's engine was dropped with its closed loop

    async def close() -> None:
        await app.aenqueue("last")
        engine = access.engine()
        await access.aclose()  # what app.aclose() does first, on the running loop
        assert engine.sync_engine.pool.checkedin() == 0  # its connections were closed

    asyncio.run(close())
    assert access._engines == {}
    with pytest.raises(Exception, match="closed"):
        asyncio.run(app.acounts())


def test_the_async_engines_sessions_run_in_utc_and_rows_come_back_in_utc(app: Tether) -> None:
    """As the sync engine's: every connection of a loop's engine (the SQLAlchemy path and the raw
    driver pool's) sets its session time zone to UTC, so ``timestamptz`` values come back in
    ``datetime.timezone.utc`` and no column is converted again."""
    from datetime import UTC

    access: Any = app.async_access

    async def scenario() -> tuple[str, str, Any, Any]:
        job = (await app.aenqueue("a", {"n": 1})).job  # the driver path
        async with access.engine().connect() as conn:
            zone = (await conn.exec_driver_sql("SHOW TIME ZONE")).scalar()
            stored = (await conn.exec_driver_sql("SELECT TIMESTAMPTZ '2026-03-29 01:30:00+00'")).scalar()
        drivers = access.loop_engine().drivers
        leased = await drivers.acquire()
        try:
            await leased.cursor.execute("SHOW TIME ZONE")
            driver_zone = (await leased.cursor.fetchone())[0]
        finally:
            await drivers.release(leased, reusable=True)
        return zone, driver_zone, stored, job.created_at

    zone, driver_zone, stored, created = asyncio.run(scenario())
    assert zone == "UTC" and driver_zone == "UTC"
    assert stored.tzinfo is UTC and stored.hour == 1 and created.tzinfo is UTC
