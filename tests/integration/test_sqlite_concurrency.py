"""Case C20 (scaled to a few seconds): several processes lease and complete on one SQLite file
while another process enqueues.

Every job must complete exactly once, none may be left running, and no worker may ever see
"database is locked" (the repository retries it) or read it as an empty queue.  Each worker
records every execution in its own table row inside the database before completing, so
"exactly once" is checked from the data, not from the workers' say-so.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text
from tether.adapters.sqlalchemy import SqliteJobRepository, open_repository
from tether.domain.job import JobStatus
from tether.domain.validation import prepare_job

WORKERS = 4
THREADS_LIMIT = 4
JOBS = 300
ENQUEUE_INTERVAL = 0.005  # ~200 jobs/s, as in C20


def _now() -> datetime:
    return datetime.now(UTC)


def _enqueuer(url: str, errors: multiprocessing.Queue[str]) -> None:
    try:
        repo = open_repository(url)
        for i in range(JOBS):
            now = _now()
            repo.enqueue(prepare_job("c20.job", {"i": i}, now=now, idempotency_key=f"c20-{i}"), now=now)
            time.sleep(ENQUEUE_INTERVAL)
        repo.close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        errors.put(traceback.format_exc())


def _worker(url: str, name: str, deadline: float, errors: multiprocessing.Queue[str]) -> None:
    try:
        repo = open_repository(url)
        assert isinstance(repo, SqliteJobRepository)
        idle_since: float | None = None
        while time.monotonic() < deadline:
            jobs = repo.lease(queues=None, worker_id=name, now=_now(), lease_timeout=600, limit=THREADS_LIMIT)
            if not jobs:
                counts = repo.count_by_status()
                if counts[JobStatus.COMPLETED] >= JOBS:
                    break
                idle_since = idle_since or time.monotonic()
                time.sleep(0.005)
                continue
            idle_since = None
            for job in jobs:
                with repo.transaction() as tx:  # the "handler": record the execution
                    tx.execute(text("INSERT INTO executions (job_id, worker) VALUES (:j, :w)"), {"j": job.id, "w": name})
                repo.complete(job.id, job.lease_token or "", now=_now())
        repo.close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        errors.put(f"{name}: {traceback.format_exc()}")


@pytest.mark.slow
def test_c20_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c20.db'}"
    repo = open_repository(url)
    with repo.transaction() as tx:
        tx.execute(text("CREATE TABLE executions (job_id INTEGER NOT NULL, worker TEXT NOT NULL)"))
    ctx = multiprocessing.get_context("fork")
    errors: multiprocessing.Queue[str] = ctx.Queue()
    deadline = time.monotonic() + 60
    procs = [ctx.Process(target=_enqueuer, args=(url, errors))]
    procs += [ctx.Process(target=_worker, args=(url, f"w{i}", deadline, errors)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    reported = []
    while not errors.empty():
        reported.append(errors.get())
    assert not alive, "a process hung"
    assert reported == [], "\n".join(reported)
    assert [p.exitcode for p in procs] == [0] * len(procs)

    counts = repo.count_by_status()
    assert counts[JobStatus.COMPLETED] == JOBS
    assert counts[JobStatus.RUNNING] == 0 and counts[JobStatus.QUEUED] == 0 and counts[JobStatus.RETRYING] == 0
    with repo.engine.connect() as conn:
        per_job = conn.execute(text("SELECT job_id, COUNT(*) FROM executions GROUP BY job_id")).all()
        workers_used = conn.execute(text("SELECT COUNT(DISTINCT worker) FROM executions")).scalar_one()
    assert len(per_job) == JOBS and all(n == 1 for _, n in per_job)
    assert workers_used >= 2  # the work really was shared
    assert all(j.attempts == 1 for j in repo.list_jobs(limit=JOBS))
    repo.close()
