"""An enqueue whose commit landed but whose answer was lost with the connection, on PostgreSQL.

With an idempotency key the enqueue is sent again and the key makes it land once: the caller gets
the one stored job.  Without a key it is never sent again: the caller is told the job "may or
may not have been stored" (the only case where an enqueue's outcome is not known), and it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain.errors import StorageUnavailable
from tether.domain.validation import prepare_job

from tests.postgres_fixtures import schema_name, temporary_repository

pytestmark = pytest.mark.postgres


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("lostcommit"), pool_size=4) as repo:
        yield repo


def connection_lost() -> sa_exc.OperationalError:
    """What the driver raises when the server's answer to a COMMIT never arrives."""
    return sa_exc.OperationalError(
        "COMMIT", {}, psycopg.OperationalError("server closed the connection unexpectedly"), connection_invalidated=True
    )


def test_a_keyed_enqueue_whose_answer_was_lost_is_sent_again_and_stored_once(
    repo: PostgresJobRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    real = repo._insert_one
    attempts: list[int] = []

    def commit_lands_then_the_connection_drops(conn: Any, new_job: Any, now: Any) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            with repo.engine.begin() as other:  # the first attempt's row is committed ...
                real(other, new_job, now)
            raise connection_lost()  # ... and its answer is lost
        return real(conn, new_job, now)

    monkeypatch.setattr(repo, "_insert_one", commit_lands_then_the_connection_drops)
    result = repo.enqueue(prepare_job("emails.send", {"n": 1}, now=clock.now(), idempotency_key="order-7"), now=clock.now())
    assert len(attempts) == 2
    assert [job.id for job in repo.list_jobs()] == [result.job.id]
    assert result.job.idempotency_key == "order-7" and result.job.payload == {"n": 1}


def test_an_unkeyed_enqueue_whose_answer_was_lost_may_or_may_not_be_stored(
    repo: PostgresJobRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    real = repo._driver_once
    attempts: list[int] = []

    def statement_lands_then_the_connection_drops(doing: str, sql: str, params: Any) -> Any:
        attempts.append(1)
        real(doing, sql, params)  # the INSERT ran in autocommit: the row is stored ...
        raise _UnknownOutcome(connection_lost())  # ... and its answer is lost

    monkeypatch.setattr(repo, "_driver_once", statement_lands_then_the_connection_drops)
    with pytest.raises(StorageUnavailable, match="may or may not have been stored"):
        repo.enqueue(prepare_job("emails.send", {"n": 2}, now=clock.now()), now=clock.now())
    assert len(attempts) == 1  # never sent twice
    assert [job.payload for job in repo.list_jobs()] == [{"n": 2}]
