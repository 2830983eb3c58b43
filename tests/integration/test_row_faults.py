"""One bad row must not stop a batch: leases, reaps and completions on SQLite and PostgreSQL whose
table has a trigger that refuses one job's row (as a user's trigger, a constraint or a corrupt row
would), and the worker's completion batcher on any store.

The triggers refuse: leasing a job of type ``bad.lease``, reaping one of type ``bad.reap``,
completing one of type ``bad.complete``.  The other rows of each batch must go through, the bad
one be reported alone or left out of batches for a while.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.sqlalchemy import open_repository
from tether.adapters.sqlalchemy.row_faults import SKIP_SECONDS
from tether.domain.errors import StorageRowError
from tether.domain.job import Job, JobStatus, NewJob
from tether.entrypoints.worker.completions import CompletionBatcher

from tests.postgres_fixtures import schema_name, temporary_repository

_schemas = itertools.count()

PG_TRIGGER = """
CREATE FUNCTION {schema}.refuse_bad_rows() RETURNS trigger AS $$
BEGIN
  IF NEW.job_type = 'bad.lease' AND NEW.status = 'running' THEN RAISE EXCEPTION 'no lease for job %', NEW.id; END IF;
  IF NEW.job_type = 'bad.reap' AND OLD.status = 'running' AND NEW.status <> 'running' AND NEW.last_error LIKE 'LeaseExpired%'
    THEN RAISE EXCEPTION 'no reap for job %', NEW.id; END IF;
  IF NEW.job_type = 'bad.complete' AND NEW.status = 'completed' THEN RAISE EXCEPTION 'no completion for job %', NEW.id; END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER refuse_bad_rows BEFORE UPDATE ON {schema}.tether_jobs FOR EACH ROW EXECUTE FUNCTION {schema}.refuse_bad_rows();
"""
SQLITE_TRIGGERS = [
    ("CREATE TRIGGER refuse_lease BEFORE UPDATE ON tether_jobs WHEN NEW.job_type = 'bad.lease' AND NEW.status = 'running' "
    "BEGIN SELECT RAISE(ABORT, 'no lease'); END"),
    ("CREATE TRIGGER refuse_reap BEFORE UPDATE ON tether_jobs WHEN NEW.job_type = 'bad.reap' AND OLD.status = 'running' "
    "AND NEW.status <> 'running' AND NEW.last_error LIKE 'LeaseExpired%' BEGIN SELECT RAISE(ABORT, 'no reap'); END"),
    ("CREATE TRIGGER refuse_complete BEFORE UPDATE ON tether_jobs WHEN NEW.job_type = 'bad.complete' "
    "AND NEW.status = 'completed' BEGIN SELECT RAISE(ABORT, 'no completion'); END"),
]
T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        repository = open_repository(f"sqlite:///{tmp_path / 'jobs.db'}")
        with repository.engine.begin() as conn:
            for statement in SQLITE_TRIGGERS:
                conn.execute(text(statement))
        yield repository
        repository.close()
        return
    schema = schema_name(f"rowf{next(_schemas)}")
    with temporary_repository(schema) as pg:
        with pg.engine.begin() as conn:
            conn.execute(text(PG_TRIGGER.format(schema=f'"{schema}"')))
        yield pg


def add(repo: Any, job_type: str, priority: int = 0) -> Job:
    return repo.enqueue(NewJob(job_type=job_type, queue="default", payload_json="{}", priority=priority, max_attempts=3, scheduled_at=T0), now=T0).job


def lease(repo: Any, now: datetime = T0, limit: int = 20, queues: list[str] | None = None) -> list[Job]:
    return repo.lease(queues=queues, worker_id="w", now=now, lease_timeout=60, limit=limit)


def test_a_lease_batch_leases_every_row_but_the_bad_one_and_then_leaves_it_out(repo: Any) -> None:
    good = [add(repo, "good").id for _ in range(5)]
    bad = add(repo, "bad.lease", priority=9).id  # first in lease order: every batch holds it
    assert [j.id for j in lease(repo)] == good
    assert repo.get(bad).status is JobStatus.QUEUED and repo.get(bad).attempts == 0
    assert repo._skipped.ids() == [bad]
    more = [add(repo, "good").id for _ in range(3)]
    assert [j.id for j in lease(repo)] == more  # one batch statement that leaves the bad row out
    assert repo.get(bad).status is JobStatus.QUEUED


def test_a_limited_queue_leases_around_a_bad_row_and_then_leaves_it_out(repo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    repo.set_queue_limit("default", 4, now=T0)
    good = [add(repo, "good").id for _ in range(3)]
    bad = add(repo, "bad.lease", priority=9).id  # first in lease order: the limited queue's lease meets it
    assert [j.id for j in lease(repo)] == good
    assert repo._skipped.ids() == [bad] and repo.get(bad).status is JobStatus.QUEUED
    more = [add(repo, "good").id for _ in range(3)]

    def no_row_by_row(**_: Any) -> list[Job]:
        raise AssertionError("the limited queue's lease statement met the skipped row again")

    monkeypatch.setattr(repo, "_lease_row_by_row", no_row_by_row)
    assert [j.id for j in lease(repo)] == more[:1]  # the one free slot of four; the bad row left out
    assert repo.get(bad).status is JobStatus.QUEUED


def test_a_reap_pass_reaps_every_row_but_the_bad_one(repo: Any) -> None:
    bad = add(repo, "bad.reap").id
    good = [add(repo, "good").id for _ in range(4)]
    assert sorted(j.id for j in lease(repo)) == sorted([bad, *good])
    later = T0 + timedelta(seconds=61)
    reaped = repo.reap(now=later, limit=100)
    assert [j.id for j in reaped] == good
    assert {j.status for j in reaped} == {JobStatus.RETRYING}
    assert repo.get(bad).status is JobStatus.RUNNING
    assert repo._skipped.ids() == [bad]
    assert repo.reap(now=later, limit=100) == []  # left out: no statement fails on it meanwhile


def test_complete_and_lease_writes_its_completions_and_leases_around_a_bad_row(repo: Any) -> None:
    done = [add(repo, "good").id for _ in range(3)]
    running = lease(repo)
    bad = add(repo, "bad.lease", priority=9).id
    fresh = [add(repo, "good").id for _ in range(2)]
    results, leased = repo.complete_and_lease(
        [(j.id, j.lease_token) for j in running], now=T0, queues=None, worker_id="w", lease_timeout=60, limit=5
    )
    assert [(r.id, r.status) for r in results] == [(i, JobStatus.COMPLETED) for i in done]
    assert [j.id for j in leased] == fresh
    assert repo.get(bad).status is JobStatus.QUEUED and repo._skipped.ids() == [bad]


def test_a_bad_completion_is_refused_alone_by_the_batcher(repo: Any) -> None:
    ids = [add(repo, "good").id, add(repo, "bad.complete").id, add(repo, "good").id]
    running = lease(repo)
    with pytest.raises(StorageRowError):  # one statement for the batch: refused whole
        repo.complete_many([(j.id, j.lease_token) for j in running], now=T0)
    answers = batcher_answers(repo, running)
    assert [type(a).__name__ for a in answers] == ["Job", "StorageRowError", "Job"]
    assert [repo.get(i).status for i in ids] == [JobStatus.COMPLETED, JobStatus.RUNNING, JobStatus.COMPLETED]


def batcher_answers(repo: Any, running: list[Job]) -> list[Job | BaseException]:
    batcher = CompletionBatcher(repo, FakeClock(T0))
    answers: dict[int, Job | BaseException] = {}
    for job in running:  # queued before the flusher starts: one batch
        assert job.lease_token is not None
        batcher.submit(job.id, job.lease_token, lambda result, i=job.id: answers.__setitem__(i, result))
    batcher.start()
    batcher.close()
    return [answers[j.id] for j in running]


def test_the_batcher_answers_a_refused_row_alone_on_any_store() -> None:
    class RefusingOne(InMemoryJobRepository):
        def complete_many(self, items: Any, *, now: datetime) -> list[Any]:
            if any(job_id == refused for job_id, _ in items):
                raise StorageRowError(f"job {refused} refused")
            return super().complete_many(items, now=now)

    memory = RefusingOne()
    ids = [memory.enqueue(NewJob(job_type="t", queue="default", payload_json="{}", priority=0, max_attempts=3, scheduled_at=T0), now=T0).job.id for _ in range(4)]
    refused = ids[2]
    running = lease(memory)
    answers = batcher_answers(memory, running)
    assert [type(a).__name__ for a in answers] == ["Job", "Job", "StorageRowError", "Job"]
    assert [memory.get(i).status for i in ids] == [JobStatus.COMPLETED] * 2 + [JobStatus.RUNNING, JobStatus.COMPLETED]


def test_a_row_that_keeps_failing_is_left_out_twice_as_long_each_time() -> None:
    from tether.adapters.sqlalchemy.row_faults import SkippedRows

    book = SkippedRows()
    error = StorageRowError("no")
    assert [book.failed(7, "lease", error) for _ in range(3)] == [SKIP_SECONDS[0], 2 * SKIP_SECONDS[0], 4 * SKIP_SECONDS[0]]
    assert book.ids() == [7]
    book.succeeded(7)
    assert book.ids() == []
    assert book.failed(7, "lease", error) == SKIP_SECONDS[0]


def test_a_worker_pool_runs_every_job_but_the_bad_ones(repo: Any) -> None:
    """A real pool (refills through ``complete_and_lease``): a job whose lease is refused and one
    whose completion is refused do not hold back the 30 others, each completed once."""
    from tether.adapters.clock import SystemClock
    from tether.adapters.polling import PollingDispatcher
    from tether.entrypoints.service import Tether

    from tests.conftest import wait_for

    clock = SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.02), clock)
    runs: list[int] = []
    for job_type in ("good", "bad.complete", "bad.lease"):
        app.handler(job_type)(lambda payload, ctx: runs.append(ctx.job.id))
    bad_lease = app.enqueue("bad.lease", {}, priority=9).job.id
    bad_complete = app.enqueue("bad.complete", {}, priority=5).job.id
    good = [app.enqueue("good", {"n": n}).job.id for n in range(30)]
    with app.worker(concurrency=4, lease_timeout=60, max_wait=0.05, drain_timeout=1):
        wait_for(lambda: all(repo.get(i).status is JobStatus.COMPLETED for i in good), 30.0, "the good jobs completed")
    assert sorted(runs) == sorted([bad_complete, *good])
    assert repo.get(bad_lease).status is JobStatus.QUEUED
    # its completion was refused alone: never completed, left running for the reaper at its lease expiry
    assert repo.get(bad_complete).status is JobStatus.RUNNING
