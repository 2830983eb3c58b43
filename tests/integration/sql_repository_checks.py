"""Checks that the two SQL repositories (SQLite and PostgreSQL) must both pass beyond the contract
suite: regressions of SQL both of them write, each called from a test of
tests/integration/test_sqlite_repository_sql.py and test_postgres_repository_sql.py."""

from __future__ import annotations

from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import SqlAlchemyJobRepository
from tether.domain.errors import LeaseLost
from tether.domain.job import JobStatus, NewJob


def check_a_stale_token_next_to_the_current_one_is_lease_lost(
    repo: SqlAlchemyJobRepository, clock: FakeClock, new_job: NewJob
) -> None:
    """``complete_many`` given one job twice, under a stale token (its lease was reaped) and then
    under the current one: the stale item is LeaseLost carrying its own token, the current one
    completes the job (matching written rows by id alone once reported both completed)."""
    job = repo.enqueue(new_job, now=clock.now()).job
    stale = repo.lease(queues=None, worker_id="a", now=clock.now(), lease_timeout=60)[0]
    clock.advance(61)
    assert [j.id for j in repo.reap(now=clock.now())] == [job.id]
    current = repo.lease(queues=None, worker_id="b", now=clock.now(), lease_timeout=60)[0]
    assert stale.lease_token != current.lease_token
    outcomes = repo.complete_many(
        [(job.id, stale.lease_token or ""), (job.id, current.lease_token or "")], now=clock.now()
    )
    assert isinstance(outcomes[0], LeaseLost) and outcomes[0].token == stale.lease_token
    assert not isinstance(outcomes[1], LeaseLost) and outcomes[1].status is JobStatus.COMPLETED
    assert repo.get(job.id).status is JobStatus.COMPLETED
