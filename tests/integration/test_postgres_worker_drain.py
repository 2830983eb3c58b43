"""Issue 3's concurrency test on real PostgreSQL: 4 worker processes x 4 threads drain jobs whose
handler records each execution in a table.

Expected: every job completed, exactly one execution each (so never two live leases running one
job), attempts 1, nothing left running.  The workers are the real worker pool
(``app.worker(...).run(stop_when_idle=True)``) in child processes on one schema of this run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.domain.job import JobStatus
from tether.domain.timeutil import UTC
from tether.domain.validation import prepare_job

from tests.conftest import DATABASE_URL
from tests.postgres_fixtures import schema_name, temporary_repository

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
SCHEMA = schema_name("drain")
JOBS = 10_000
PROCESSES = 4
THREADS = 4

CHILD = textwrap.dedent(
    """
    import sys
    from sqlalchemy import text
    from tether.adapters.clock import SystemClock
    from tether.adapters.polling import PollingDispatcher
    from tether.adapters.sqlalchemy import open_repository
    from tether.entrypoints.service import Tether

    url, schema, name = sys.argv[1], sys.argv[2], sys.argv[3]
    repo, clock = open_repository(url, schema=schema, create=False, pool_size=8), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.2), clock)

    @app.handler("drain.record")
    def record(payload, ctx):
        with repo.engine.begin() as conn:
            conn.execute(
                text(f'INSERT INTO "{schema}".executions (job_id, lease_token, worker) VALUES (:j, :t, :w)'),
                {"j": ctx.job.id, "t": ctx.job.lease_token, "w": name},
            )

    stats = app.worker(concurrency=THREADS, lease_timeout=300, reap_interval=5, worker_id=name).run(
        stop_when_idle=True, install_signal_handlers=False)
    app.close()
    print(stats)
    """
).replace("THREADS", str(THREADS))


@pytest.fixture
def repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(SCHEMA) as repository:
        yield repository


def test_four_processes_drain_every_job_exactly_once(repo: PostgresJobRepository) -> None:
    from datetime import datetime

    with repo.engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE "{SCHEMA}".executions (job_id bigint NOT NULL, lease_token text NOT NULL, worker text NOT NULL)'
        )
    now = datetime.now(UTC)
    repo.enqueue_many([prepare_job("drain.record", {"i": i}, now=now) for i in range(JOBS)], now=now)
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, DATABASE_URL, SCHEMA, f"drain-{n}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in range(PROCESSES)
    ]
    outputs = [child.communicate(timeout=240) for child in children]
    assert [child.returncode for child in children] == [0] * PROCESSES, outputs

    counts = repo.count_by_status()
    assert counts[JobStatus.COMPLETED] == JOBS, counts
    assert counts[JobStatus.RUNNING] == counts[JobStatus.QUEUED] == counts[JobStatus.RETRYING] == counts[JobStatus.DEAD] == 0
    with repo.engine.connect() as conn:
        executions, distinct_jobs, max_per_job, workers = conn.execute(
            text(
                f'SELECT count(*), count(DISTINCT job_id), max(n), (SELECT count(DISTINCT worker) FROM "{SCHEMA}".executions) '
                f'FROM (SELECT job_id, count(*) AS n FROM "{SCHEMA}".executions GROUP BY job_id) per_job '
                f'JOIN "{SCHEMA}".executions USING (job_id)'
            )
        ).one()
        attempts = conn.execute(text(f'SELECT max(attempts), min(attempts) FROM "{SCHEMA}".tether_jobs')).one()
    assert (executions, distinct_jobs, max_per_job) == (JOBS, JOBS, 1)
    assert workers == PROCESSES  # every process took part
    assert tuple(attempts) == (1, 1)
