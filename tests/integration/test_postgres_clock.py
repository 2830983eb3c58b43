"""The database clock on real PostgreSQL (issue 3 item 8: one time source for every stored time).

The server is real; only the local time source is skewed (an hour ahead, or jumping), since the
machine's own clock cannot be changed from a test.  Expected: ``now()`` within 1 s of the
server's ``clock_timestamp()`` whatever the local source says; never backwards across a
re-measurement that moves time back; a failed measurement (the clock's database dropped for
real) keeps the last offset; a worker whose machine runs an hour fast does not lease a job due
in 30 minutes; ``tether.connect`` picks this clock for PostgreSQL and a passed clock still wins.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import tether
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from tether.adapters.clock import FakeClock, SystemClock
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.adapters.sqlalchemy.clock import DatabaseClock
from tether.domain.timeutil import UTC
from tether.domain.validation import prepare_job

from tests.conftest import DATABASE_URL, RUN_ID
from tests.postgres_fixtures import schema_name, server_engine, temporary_app, temporary_repository

pytestmark = [pytest.mark.postgres]
HOUR = 3600.0


class SkewedSource:
    """A local monotonic source ``skew`` seconds off the real one; ``jump`` moves it further."""

    def __init__(self, skew: float) -> None:
        self.skew = skew

    def __call__(self) -> float:
        return time.monotonic() + self.skew

    def jump(self, seconds: float) -> None:
        self.skew += seconds


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with server_engine() as engine:
        yield engine


def server_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        value = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
    assert isinstance(value, datetime)
    return value


def test_local_clock_an_hour_fast_still_gives_the_servers_time(engine: Engine) -> None:
    fast_wall = lambda: time.time() + HOUR
    clock = DatabaseClock(engine, local=SkewedSource(HOUR), wall=fast_wall)
    ours = clock.now()
    theirs = server_now(engine)
    assert ours.tzinfo is not None and ours.utcoffset() == timedelta(0)
    assert abs((ours - theirs).total_seconds()) < 1.0
    assert clock.synced and clock.round_trip is not None and clock.round_trip < 1.0


def test_reads_between_refreshes_run_no_statement(engine: Engine) -> None:
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(statement)

    clock = DatabaseClock(engine, refresh_interval=300)
    event.listen(engine, "before_cursor_execute", record)
    try:
        values = [clock.now() for _ in range(1000)]
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert statements == []
    assert values == sorted(values)
    assert abs((clock.now() - server_now(engine)).total_seconds()) < 1.0


def test_never_backwards_when_a_refresh_moves_time_back(engine: Engine) -> None:
    source = SkewedSource(0.0)
    clock = DatabaseClock(engine, local=source, refresh_interval=300)
    first = clock.now()
    source.jump(5.0)  # the local source runs 5 s ahead of the measured offset: now() reads +5 s
    ahead = clock.now()
    assert (ahead - first).total_seconds() >= 5.0
    assert clock.refresh()  # the real server says it is 5 s earlier than that
    seen: list[list[datetime]] = [[] for _ in range(4)]

    def read(out: list[datetime]) -> None:
        for _ in range(2000):
            out.append(clock.now())

    threads = [threading.Thread(target=read, args=(out,)) for out in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for values in seen:
        assert values[0] >= ahead
        assert all(later >= earlier for earlier, later in itertools.pairwise(values))
    # the clock held at the last value instead of stepping back to the server's time
    assert abs((clock.now() - ahead).total_seconds()) < 1.0
    assert (clock.now() - server_now(engine)).total_seconds() > 3.0


def test_refreshes_when_stale_in_the_callers_thread(engine: Engine) -> None:
    source = SkewedSource(0.0)
    clock = DatabaseClock(engine, local=source, refresh_interval=30)
    measured = clock.offset
    source.jump(31.0)  # 31 s later by the local source: past refresh_interval
    clock.now()  # measures again in this thread
    assert abs(clock.offset - (measured - 31.0)) < 0.5  # the new offset absorbed the jump
    later = DatabaseClock(engine)  # a fresh clock agrees once the held value is passed
    assert clock.now() >= later.now() - timedelta(seconds=32)


@pytest.fixture
def own_database(engine: Engine) -> Iterator[str]:
    name = f"tether_clock_{RUN_ID}"
    admin = engine.execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = make_url(DATABASE_URL).set(database=name)
    yield url.render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_failed_refresh_keeps_the_offset_and_logs_at_a_bounded_rate(
    engine: Engine, own_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock_engine = create_engine(own_database, connect_args={"connect_timeout": 2})
    source = SkewedSource(HOUR)
    clock = DatabaseClock(clock_engine, local=source, refresh_interval=0.05, retry_interval=0.05)
    offset = clock.offset
    admin = engine.execution_options(isolation_level="AUTOCOMMIT")
    name = make_url(own_database).database
    try:
        with admin.connect() as conn:  # the clock's database disappears: every measurement fails
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        caplog.set_level(logging.WARNING, logger="tether.adapters.sqlalchemy.clock")
        values = []
        for _ in range(20):
            time.sleep(0.06)  # past retry_interval: each now() tries again and fails
            values.append(clock.now())
        assert clock.offset == offset
        assert all(later >= earlier for earlier, later in itertools.pairwise(values))
        assert abs((values[-1] - server_now(engine)).total_seconds()) < 1.0
        warnings = [r for r in caplog.records if r.name == "tether.adapters.sqlalchemy.clock"]
        assert len(warnings) == 1  # 20 failures, one warning per LOG_EVERY (60 s)
        assert "keeping the last measured offset" in warnings[0].getMessage()
        assert not clock.refresh()
        with admin.connect() as conn:  # back: the next measurement succeeds again
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        assert clock.refresh()
        assert abs((clock.now() - server_now(engine)).total_seconds()) < 1.0
    finally:
        clock_engine.dispose()


def test_from_url_keeps_no_connection_open_between_measurements(engine: Engine) -> None:
    name = f"tether-clock-{RUN_ID}"
    clock = DatabaseClock.from_url(DATABASE_URL, application_name=name, refresh_interval=300)
    try:
        assert clock.synced
        assert abs((clock.now() - server_now(engine)).total_seconds()) < 1.0
        with engine.connect() as conn:
            open_now = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :n"), {"n": name}
            ).scalar_one()
        assert open_now == 0
    finally:
        clock._engine.dispose()


def test_first_measurement_failing_falls_back_to_the_wall_clock(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tether.adapters.sqlalchemy.clock")
    nowhere = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 1})
    try:
        clock = DatabaseClock(nowhere, wall=lambda: 1_000_000_000.0, local=lambda: 50.0)
        assert not clock.synced
        assert clock.now() == datetime(2001, 9, 9, 1, 46, 40, tzinfo=UTC)
        assert "local wall clock's offset" in caplog.records[-1].getMessage()
    finally:
        nowhere.dispose()


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("clock")) as repository:
        yield repository


def test_a_worker_an_hour_fast_does_not_lease_a_job_due_in_half_an_hour(repo: PostgresJobRepository) -> None:
    producer = DatabaseClock(repo.engine)
    worker_clock = DatabaseClock(repo.engine, local=SkewedSource(HOUR), wall=lambda: time.time() + HOUR)
    new = prepare_job("clock.later", {}, now=producer.now(), delay=1800)
    job = repo.enqueue(new, now=producer.now()).job
    assert repo.lease(queues=None, worker_id="fast", now=worker_clock.now(), lease_timeout=60, limit=1) == []
    # the same worker on its machine's wall clock would have taken it half an hour early
    fast_wall = datetime.now(UTC) + timedelta(seconds=HOUR)
    leased = repo.lease(queues=None, worker_id="fast", now=fast_wall, lease_timeout=60, limit=1)
    assert [j.id for j in leased] == [job.id]


def test_connect_uses_the_database_clock_on_postgres_and_a_passed_clock_wins() -> None:
    schema = schema_name("clockc")
    with temporary_app(schema) as app:
        assert isinstance(app.clock, DatabaseClock)
        assert app.clock.synced
        assert abs((app.clock.now() - server_now(app.repository.engine)).total_seconds()) < 1.0  # type: ignore[attr-defined]
    fake = FakeClock()
    with temporary_app(schema, clock=fake) as app:
        assert app.clock is fake


def test_sqlite_keeps_the_system_clock(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = tether.connect(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        assert isinstance(app.clock, SystemClock)
    finally:
        app.close()
