"""An idle pooled connection killed by the server is pinged and replaced before use.

The pool pings only connections idle longer than ``PING_IF_IDLE`` seconds (busy workers skip the
round trip), so an enqueue without an idempotency key, which is never re-sent when its outcome is
unknown, still succeeds after the server dropped every idle connection (a restart, an idle
timeout).  Own schema per run, dropped at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository, pg_connections
from tether.adapters.sqlalchemy.postgres import normalize_postgres_url
from tether.domain.job import JobStatus
from tether.domain.validation import prepare_job

from tests.conftest import DATABASE_URL, RUN_ID
from tests.postgres_fixtures import dropping_schema, open_postgres, schema_name

pytestmark = pytest.mark.postgres
SCHEMA = schema_name("ping")
APP_NAME = f"tether-ping-{RUN_ID}"[:60]


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    open_postgres(SCHEMA).close()  # creates the tables
    with dropping_schema(
        PostgresJobRepository.from_url(DATABASE_URL, schema=SCHEMA, pool_size=2, application_name=APP_NAME)
    ) as repo:
        yield repo


def _kill_backends() -> int:
    admin = create_engine(normalize_postgres_url(DATABASE_URL))
    with admin.connect() as conn:
        killed = conn.execute(
            text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :name"),
            {"name": APP_NAME},
        ).scalar_one()
    admin.dispose()
    return int(killed)


def test_an_idle_connection_killed_by_the_server_is_replaced_before_an_unkeyed_enqueue(
    repo: PostgresJobRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_connections, "PING_IF_IDLE", 0.05)
    clock = FakeClock()
    first = repo.enqueue(prepare_job("t", {"n": 1}, now=clock.now()), now=clock.now()).job  # a pooled connection
    assert _kill_backends() >= 1
    time.sleep(0.2)  # idle past PING_IF_IDLE: the next checkout pings, fails, and reconnects
    second = repo.enqueue(prepare_job("t", {"n": 2}, now=clock.now()), now=clock.now())
    assert second.created and second.job.id != first.id
    assert [j.payload for j in repo.list_jobs(status=JobStatus.QUEUED)] == [{"n": 1}, {"n": 2}]
