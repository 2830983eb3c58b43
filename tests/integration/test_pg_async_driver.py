"""The async API's single enqueue on raw psycopg connections (``pg_async_driver``), on real
PostgreSQL: the loop's driver pool and its SQLAlchemy pool share ``pool_size`` connections without
starving each other, connections are back in the engine pool when a loop ends (closed by
``asyncio.run`` or by hand), a connection the server killed is never reused (an idle one is
pinged first), and cancelled calls leak no connection."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine
from tether.domain.errors import StorageUnavailable
from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether

from tests.postgres_fixtures import DATABASE_URL, schema_name, temporary_app

pytestmark = pytest.mark.postgres

POOL = 3


@pytest.fixture
def app() -> Iterator[Tether]:
    with temporary_app(schema_name("async_driver"), pool_size=POOL) as app:
        yield app


def terminate_async_backends(app: Tether) -> int:
    """Kill, server-side, every connection of the app's async engines (what a restart does)."""
    engine = create_engine(DATABASE_URL)
    try:
        with engine.begin() as conn:
            return len(conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'tether-async' AND datname = current_database() AND pid <> pg_backend_pid()"
            ).all())
    finally:
        engine.dispose()


def unchecked_in_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "non-checked-in connection" in str(w.message)]


def test_a_burst_of_enqueues_leaves_room_for_the_loops_other_calls(app: Tether) -> None:
    access: Any = app.async_access

    async def scenario() -> tuple[dict[JobStatus, int], int, float]:
        burst = [asyncio.ensure_future(app.aenqueue("burst", {"i": i})) for i in range(60)]
        await asyncio.sleep(0)
        started = time.monotonic()
        await app.acounts()  # a SQLAlchemy checkout while the driver pool holds every connection
        async with app.atransaction() as tx:
            await app.aenqueue("in.tx", connection=tx)
        took = time.monotonic() - started
        await asyncio.gather(*burst)
        held = access.loop_engine().drivers.held
        checked_out = access.engine().sync_engine.pool.checkedout()
        assert held <= POOL and checked_out <= POOL
        return await app.acounts(), held, took

    counts, held, took = asyncio.run(scenario())
    assert counts[JobStatus.QUEUED] == 61
    assert took < 10  # not the engine pool's 30 s timeout
    assert held >= 1  # the burst's connections stay leased for the next enqueues


def test_an_idle_driver_pool_lends_its_connections_to_a_read(app: Tether) -> None:
    async def scenario() -> int:
        await asyncio.gather(*(app.aenqueue("x") for _ in range(POOL * 4)))  # leases every connection
        return (await app.acounts())[JobStatus.QUEUED]  # would wait 30 s for a connection, then fail

    started = time.monotonic()
    assert asyncio.run(scenario()) == POOL * 4
    assert time.monotonic() - started < 10


def test_the_end_of_a_loop_hands_every_connection_back(app: Tether) -> None:
    access: Any = app.async_access
    pools: list[Any] = []

    async def enqueue(n: int) -> None:
        await asyncio.gather(*(app.aenqueue("loop", {"n": n}) for _ in range(5)))
        pools.append(access.engine().sync_engine.pool)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(enqueue(1))
        assert pools[0].checkedout() == 0  # asyncio.run's end returned the driver pool's connections
        loop = asyncio.new_event_loop()  # a loop closed by hand, without shutdown_asyncgens
        try:
            loop.run_until_complete(enqueue(2))
        finally:
            loop.close()
        assert asyncio.run(app.acounts())[JobStatus.QUEUED] == 10  # the closed loop's engine is dropped
        gc.collect()
    assert unchecked_in_warnings(caught) == []


def test_a_connection_killed_by_the_server_is_never_used_again(app: Tether) -> None:
    async def scenario() -> tuple[str, int]:
        await app.aenqueue("before")
        assert terminate_async_backends(app) >= 1
        await asyncio.sleep(0.1)  # busy within the last second: not pinged, the statement finds it dead
        with pytest.raises(StorageUnavailable) as info:
            await app.aenqueue("lost")
        after = await app.aenqueue("after")  # on a new connection
        return str(info.value), after.job.id

    message, _ = asyncio.run(scenario())
    assert "may or may not have been stored" in message
    assert sorted(job.job_type for job in app.list()) == ["after", "before"]


def test_an_idle_connection_is_pinged_and_replaced_before_it_is_used(app: Tether) -> None:
    async def scenario() -> None:
        await app.aenqueue("before")
        assert terminate_async_backends(app) >= 1
        await asyncio.sleep(1.3)  # idle past PING_IF_IDLE: the ping finds it dead, nothing was sent yet
        await app.aenqueue("after")  # retried on a new connection

    asyncio.run(scenario())
    assert sorted(job.job_type for job in app.list()) == ["after", "before"]


def test_cancelled_enqueues_leak_no_connection(app: Tether) -> None:
    access: Any = app.async_access
    schema = app.repository.schema  # type: ignore[attr-defined]
    blocker = create_engine(DATABASE_URL)

    async def scenario() -> int:
        with blocker.connect() as lock:
            lock.exec_driver_sql(f'LOCK TABLE "{schema}".tether_jobs IN ACCESS EXCLUSIVE MODE')
            waiting = [asyncio.ensure_future(app.aenqueue("cancelled", {"i": i})) for i in range(POOL * 3)]
            await asyncio.sleep(0.3)  # POOL of them wait for the lock, the rest for a connection
            for task in waiting:
                task.cancel()
            results = await asyncio.gather(*waiting, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results)
            lock.rollback()
        assert access.loop_engine().drivers.held <= POOL
        await asyncio.wait_for(asyncio.gather(*(app.aenqueue("after") for _ in range(POOL * 2))), 10)
        return (await app.acounts())[JobStatus.QUEUED]

    try:
        assert asyncio.run(scenario()) == POOL * 2  # the cancelled inserts waited on the lock: none stored
    finally:
        blocker.dispose()
