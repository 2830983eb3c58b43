"""Per-key running limits on PostgreSQL: a limit set by another process is never overshot while
this one's list of limited queues is stale, and the per-key counts read the keyed running index.

- A repository caches its list of limited queues for ``LIMITED_REFRESH_SECONDS`` (1 s).  A queue
  that has a running limit and then gets a per-key limit from another repository is leased by
  neither statement meanwhile: the one without the key rule finds the per-key limit in the locked
  queue row and leases nothing; after the refresh the key rule serves it.
- The lease of a per-key limited queue counts its keys' running jobs from
  ``ix_tether_jobs_running_key`` (one index-only scan), not from the table.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy.postgres import PostgresJobRepository
from tether.adapters.sqlalchemy.queue_controls import LIMITED_REFRESH_SECONDS
from tether.adapters.sqlalchemy.schema import RUNNING_KEY_INDEX
from tether.domain.validation import prepare_job

from tests.postgres_fixtures import open_postgres, schema_name, temporary_repository

pytestmark = pytest.mark.postgres

SCHEMA = schema_name("key_limits_sql")


@pytest.fixture
def repos() -> Iterator[tuple[PostgresJobRepository, PostgresJobRepository]]:
    with temporary_repository(SCHEMA) as first:
        second = open_postgres(SCHEMA)
        try:
            yield first, second
        finally:
            second.close()


def _enqueue(repo: PostgresJobRepository, clock: FakeClock, keys: list[str | None], queue: str = "api") -> None:
    repo.enqueue_many([prepare_job("t", {}, now=clock.now(), queue=queue, concurrency_key=k) for k in keys],
                      now=clock.now())


def test_a_per_key_limit_set_elsewhere_is_never_overshot_while_the_list_is_stale(
    repos: tuple[PostgresJobRepository, PostgresJobRepository],
) -> None:
    this, other = repos
    clock = FakeClock()
    this.set_queue_limit("api", 10, now=clock.now())
    _enqueue(this, clock, ["a"] * 6 + ["b"] * 6)
    assert len(this.lease(queues=["api"], worker_id="w", now=clock.now(), lease_timeout=60, limit=1)) == 1  # "a"
    other.set_queue_key_limit("api", 1, now=clock.now())  # this repository's list still says: not keyed
    taken = this.lease(queues=["api"], worker_id="w", now=clock.now(), lease_timeout=60, limit=5)
    assert taken == []  # the statement without the key rule leases nothing from a queue that now has one
    time.sleep(LIMITED_REFRESH_SECONDS + 0.1)
    taken = this.lease(queues=["api"], worker_id="w", now=clock.now(), lease_timeout=60, limit=5)
    assert [j.concurrency_key for j in taken] == ["b"]
    running = this.list_jobs(status=None, queue="api", limit=100)
    assert Counter(j.concurrency_key for j in running if j.lease_token) == {"a": 1, "b": 1}


def test_the_key_counts_read_the_keyed_running_index(
    repos: tuple[PostgresJobRepository, PostgresJobRepository], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = repos
    clock = FakeClock()
    repo.set_queue_key_limit("api", 1, now=clock.now())
    _enqueue(repo, clock, [f"k{n % 50}" for n in range(2000)] + [None] * 200)
    _enqueue(repo, clock, [None] * 2000, queue="bulk")
    assert len(repo.lease(queues=["api"], worker_id="w", now=clock.now(), lease_timeout=60, limit=30)) == 30
    with repo.engine.begin() as conn:
        conn.exec_driver_sql(f'ANALYZE "{SCHEMA}".tether_jobs')
    captured: list[tuple[str, dict[str, Any]]] = []
    real = repo._limited_sql

    def grab(shape: str, skip: bool = False, typed: bool = False) -> str:
        sql = real(shape, skip, typed)
        captured.append((sql, {}))
        return sql

    monkeypatch.setattr(repo, "_limited_sql", grab)
    assert len(repo.lease(queues=["api"], worker_id="w", now=clock.now(), lease_timeout=60, limit=8)) == 8
    monkeypatch.undo()
    [(sql, _)] = captured
    statement = sql.split("; ", 1)[1]
    params = {**repo._lease_params(["api"], "w", clock.now(), 60, 8), "p_queue": "api", "p_id": None,
              "p_now_us": 0, "p_secret": "x"}
    with repo.engine.connect() as conn:
        raw = conn.connection.driver_connection
        import psycopg

        cursor = psycopg.ClientCursor(raw)
        cursor.execute("EXPLAIN " + statement, params)
        plan = "\n".join(r[0] for r in cursor.fetchall())
        raw.rollback()
    assert plan.count(f"Index Only Scan using {RUNNING_KEY_INDEX}") == 1, plan  # read once for the full keys and each room
    assert "Seq Scan" not in plan, plan
