"""The queue summaries on PostgreSQL (``JobOverview.queue_summaries``, read by the dashboard's
snapshot and the metrics' queue gauges): one grouped statement over the live rows' partial
indexes, never a scan of the finished history, however long it is."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.adapters.sqlalchemy.transactions import run_bound
from tether.domain.overview import QueueSummary

from tests.postgres_fixtures import schema_name, temporary_repository

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCHEMA = schema_name("summaryplan")


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(SCHEMA) as repository:
        yield repository


def summaries_and_plan(repo: PostgresJobRepository, now: datetime) -> tuple[list[QueueSummary], str]:
    """``repo.queue_summaries(now=now)`` and the ``EXPLAIN`` of the very statement it sent."""
    captured: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if "GROUP BY" in statement:
            captured.append((statement, parameters))

    event.listen(repo.engine, "before_cursor_execute", grab)
    try:
        summaries = repo.queue_summaries(now=now)
    finally:
        event.remove(repo.engine, "before_cursor_execute", grab)
    [(statement, parameters)] = captured
    with repo.engine.connect() as conn:
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters))
    return summaries, plan


def test_queue_summaries_read_the_live_rows_only(repo: PostgresJobRepository) -> None:
    clock = FakeClock()
    now = clock.now()
    with repo.engine.begin() as conn:
        conn.execute(
            text(
                f'INSERT INTO "{SCHEMA}".tether_jobs (job_type, queue, payload, priority, status, attempts, max_attempts, '
                "scheduled_at, created_at, finished_at) "
                "SELECT 'done', (ARRAY['a','b'])[1 + g % 2], '{}', 0, 'completed', 1, 3, :t, :t, :t "
                "FROM generate_series(1, 200000) AS g"
            ),
            {"t": now - timedelta(hours=1)},
        )
        conn.execute(
            text(
                f'INSERT INTO "{SCHEMA}".tether_jobs (job_type, queue, payload, priority, status, attempts, max_attempts, '
                "scheduled_at, created_at) "
                "SELECT 'work', (ARRAY['a','b'])[1 + g % 2], '{}', 0, 'queued', 0, 3, :t - g * interval '1 second', :t "
                "FROM generate_series(1, 3000) AS g"
            ),
            {"t": now},
        )
        conn.exec_driver_sql(f'ANALYZE "{SCHEMA}".tether_jobs')
    summaries, plan = summaries_and_plan(repo, now)
    assert [(s.queue, s.queued, s.due) for s in summaries] == [("a", 1500, 1500), ("b", 1500, 1500)]
    assert summaries[0].latency(now) == 3000.0 and summaries[1].latency(now) == 2999.0
    assert "Seq Scan" not in plan, plan


def test_queue_summaries_run_without_parallel_workers_in_their_own_transaction_only(repo: PostgresJobRepository) -> None:
    clock = FakeClock()
    sent: list[str] = []

    def grab(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        sent.append(statement)

    event.listen(repo.engine, "before_cursor_execute", grab)
    try:
        repo.queue_summaries(now=clock.now())
        with repo.engine.connect() as conn:
            setting = conn.exec_driver_sql("SHOW max_parallel_workers_per_gather").scalar_one()
        with repo.engine.begin() as conn:  # the caller's transaction (the async API's): its settings untouched
            run_bound(conn, lambda: repo.queue_summaries(now=clock.now()))
            inside = conn.exec_driver_sql("SHOW max_parallel_workers_per_gather").scalar_one()
    finally:
        event.remove(repo.engine, "before_cursor_execute", grab)
    summaries = [i for i, s in enumerate(sent) if "GROUP BY" in s]
    assert len(summaries) == 2
    assert sent[summaries[0] - 1] == "SET LOCAL max_parallel_workers_per_gather = 0"
    assert "SET LOCAL" not in sent[summaries[1] - 1]
    assert setting != "0" and inside != "0"  # SET LOCAL ended with the read's own transaction


def test_queue_summaries_are_an_index_only_scan_of_both_live_indexes(repo: PostgresJobRepository) -> None:
    """Both live indexes carry what the summaries group by (``INCLUDE``): once the table is
    vacuumed, the statement reads no table page at all, however the live rows lie among the
    finished ones."""
    clock = FakeClock()
    now = clock.now()
    statuses = "CASE WHEN g % 50 = 0 THEN 'running' WHEN g % 50 = 1 THEN 'retrying' WHEN g % 50 = 2 THEN 'queued' ELSE 'completed' END"
    with repo.engine.begin() as conn:
        conn.execute(
            text(
                f'INSERT INTO "{SCHEMA}".tether_jobs (job_type, queue, payload, priority, status, attempts, max_attempts, '
                "scheduled_at, created_at, finished_at, lease_token, leased_by, leased_at, lease_expires_at) "
                f"SELECT 'work', (ARRAY['a','b'])[1 + g % 2], '{{}}', 0, s.status, 1, 3, :t - g * interval '1 second', :t, "
                "CASE WHEN s.status = 'completed' THEN :t END, CASE WHEN s.status = 'running' THEN md5(g::text) END, "
                "CASE WHEN s.status = 'running' THEN 'w' END, CASE WHEN s.status = 'running' THEN :t END, "
                "CASE WHEN s.status = 'running' THEN :t + interval '1 minute' END "
                f"FROM generate_series(1, 100000) AS g CROSS JOIN LATERAL (SELECT {statuses} AS status) AS s"
            ),
            {"t": now},
        )
    with repo.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'VACUUM ANALYZE "{SCHEMA}".tether_jobs')
    summaries, plan = summaries_and_plan(repo, now)
    # g % 50 = 0 and 2 are even (queue a), g % 50 = 1 is odd (queue b): 2,000 of each status
    assert [(s.queue, s.queued, s.retrying, s.running, s.due) for s in summaries] == [
        ("a", 2000, 0, 2000, 2000), ("b", 0, 2000, 0, 2000)]
    assert "Index Only Scan using ix_tether_jobs_leasable_queue" in plan, plan
    assert "Index Only Scan using ix_tether_jobs_running_expiry" in plan, plan
    assert "Heap Scan" not in plan and "Seq Scan" not in plan, plan
