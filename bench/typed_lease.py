"""A lease filtered by job type behind a backlog of another type, against the unfiltered lease, on PostgreSQL.

    .venv/bin/python bench/typed_lease.py                      # backlogs of 0, 1,000, 10,000, 100,000
    .venv/bin/python bench/typed_lease.py --backlogs 0 50000 --leases 200

For each backlog size, a fresh schema (``tether_bench_<random>``, dropped at the end) gets that
many due jobs of type ``kind.sync`` at the head of the queue (older than the rest), then
``--leases`` jobs of type ``kind.async`` behind them.  Then ``--leases / 2`` leases of one job
filtered to ``kind.async`` (what a pool with both kinds of handler sends for its async slots) are
timed one by one, and as many unfiltered leases of one job (which take the head of the backlog:
the lease a plain pool sends).  Printed: the median of each and their same-run ratio.  A figure,
not a test: nothing is asserted but that each filtered lease got a job of its type.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from tether.adapters.clock import SystemClock
from tether.adapters.sqlalchemy import open_repository
from tether.domain.validation import prepare_job

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def one_size(url: str, backlog: int, leases: int) -> tuple[float, float]:
    """(filtered, unfiltered) median seconds of one lease of one job behind ``backlog`` other jobs."""
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}"
    repo = open_repository(url, schema=schema, create=True)
    clock = SystemClock()
    try:
        with repo.engine.begin() as conn:
            conn.exec_driver_sql(
                f'INSERT INTO "{schema}".tether_jobs (job_type, queue, payload, priority, status, attempts, '
                "max_attempts, scheduled_at, created_at) SELECT 'kind.sync', 'default', '{}', 0, 'queued', 0, 3, "
                f"now() - interval '1 hour' + g * interval '1 microsecond', now() FROM generate_series(1, {backlog}) g"
            )
            conn.exec_driver_sql(f'ANALYZE "{schema}".tether_jobs')
        now = clock.now()
        for _ in range(leases):
            repo.enqueue(prepare_job("kind.async", {}, now=now), now=now)
        later = clock.now()
        filtered, unfiltered = [], []
        for _ in range(leases // 2):
            started = time.perf_counter()
            got = repo.lease(queues=None, worker_id="bench", now=later, lease_timeout=60, limit=1, job_types=["kind.async"])
            filtered.append(time.perf_counter() - started)
            assert got and got[0].job_type == "kind.async"
        for _ in range(leases // 2):
            started = time.perf_counter()
            repo.lease(queues=None, worker_id="bench", now=later, lease_timeout=60, limit=1)
            unfiltered.append(time.perf_counter() - started)
        return statistics.median(filtered), statistics.median(unfiltered)
    finally:
        repo.drop_schema()  # type: ignore[attr-defined]
        repo.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="PostgreSQL URL (default: the test server)")
    parser.add_argument("--backlogs", type=int, nargs="+", default=[0, 1_000, 10_000, 100_000])
    parser.add_argument("--leases", type=int, default=200, help="jobs of the asked type; half are leased filtered")
    args = parser.parse_args()
    for backlog in args.backlogs:
        filtered, unfiltered = one_size(args.database_url, backlog, args.leases)
        print(f"{backlog:>8,} jobs of another type ahead: filtered lease {filtered * 1e3:6.2f} ms, "
              f"unfiltered {unfiltered * 1e3:6.2f} ms, filtered/unfiltered {filtered / unfiltered:5.1f}", flush=True)


if __name__ == "__main__":
    main()
