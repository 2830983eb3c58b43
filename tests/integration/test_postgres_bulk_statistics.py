"""A large bulk enqueue refreshes PostgreSQL's planner statistics, so leases on a freshly loaded
queue use the lease-order index instead of reading and sorting every due row.  Own schema per
run, dropped at the end."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC

import pytest
from sqlalchemy import text
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository, pg_enqueue
from tether.adapters.sqlalchemy.schema import LEASABLE_INDEX
from tether.domain.validation import prepare_job

from tests.postgres_fixtures import schema_name, temporary_repository

pytestmark = pytest.mark.postgres
SCHEMA = schema_name("stats")


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(SCHEMA) as repo:
        yield repo


def _analyzed(repo: PostgresJobRepository) -> bool:
    with repo.engine.connect() as conn:
        count = conn.execute(
            text("SELECT analyze_count FROM pg_stat_user_tables WHERE schemaname = :s AND relname = 'tether_jobs'"),
            {"s": SCHEMA},
        ).scalar_one()
    return int(count) > 0


def _lease_plan(repo: PostgresJobRepository, clock: FakeClock) -> str:
    """EXPLAIN of the lease statement exactly as the repository sends it (for ``queues=None``)."""
    params = {"p_secret": secrets.token_hex(16), **repo._lease_params(None, "w", clock.now(), 60, 10)}
    with repo.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        rows = raw.execute("EXPLAIN " + repo._lease_sql("all"), params).fetchall()
        raw.rollback()
    return "\n".join(r[0] for r in rows)


def test_a_large_bulk_enqueue_analyzes_the_table_and_the_lease_uses_the_lease_order_index(
    repo: PostgresJobRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_enqueue, "ANALYZE_AFTER_ROWS", 2_000)
    clock = FakeClock()
    repo.enqueue_many([prepare_job("t", {"i": i}, now=clock.now()) for i in range(1_500)], now=clock.now())
    assert not _analyzed(repo)  # below the threshold: no ANALYZE yet
    # 20,000 due rows: without statistics the planner reads and sorts them all for every lease
    for _ in range(3):
        repo.enqueue_many([prepare_job("t", {"i": i}, now=clock.now()) for i in range(6_000)], now=clock.now())
    assert _analyzed(repo)  # past the threshold: analyzed (then not again within the interval)
    plan = _lease_plan(repo, clock)
    assert f"Index Scan using {LEASABLE_INDEX}" in plan, plan
    assert "Sort" not in plan.split("LockRows")[-1], plan


def test_bulk_enqueue_stores_payloads_keys_and_times_exactly(repo: PostgresJobRepository) -> None:
    from datetime import datetime, timedelta

    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    payload = {"s": 'é\u2028"\\ 😀 \\u0000 \t\n', "n": [1, 2.5, None, True], "k": {"ü": "x"}}
    jobs = [
        prepare_job("a.b", payload, now=now, idempotency_key="ключ-😀"),
        prepare_job("a.b", {"x": 1}, now=now, run_at=now + timedelta(microseconds=1), priority=-3, max_attempts=7),
    ]
    results = repo.enqueue_many(jobs, now=now)
    for new_job, result in zip(jobs, results):
        stored = repo.get(result.job.id)
        assert result.created and result.job == stored
        assert stored.payload_json == new_job.payload_json
        assert (stored.scheduled_at, stored.created_at) == (new_job.scheduled_at, now)
        assert (stored.idempotency_key, stored.priority, stored.max_attempts) == (
            new_job.idempotency_key, new_job.priority, new_job.max_attempts)
    assert results[0].job.payload == payload
    again = repo.enqueue_many(jobs[:1], now=now)
    assert not again[0].created and again[0].job.id == results[0].job.id
