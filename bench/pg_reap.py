"""Reaper benchmark: take back N expired leases on PostgreSQL (or a SQLite file) and print jobs/s.

    .venv/bin/python bench/pg_reap.py                          # 10,000 expired leases, passes of 100
    .venv/bin/python bench/pg_reap.py --jobs 10000 --batch 1000 --rounds 5
    .venv/bin/python bench/pg_reap.py --database-url sqlite:////tmp/reap.db
    .venv/bin/python bench/pg_reap.py --json                   # one JSON line

Each round enqueues ``--jobs`` jobs on a fresh schema (``tether_bench_<random>``, dropped at the
end; SQLite: the file is emptied first) and leases them all, 10 per lease statement 1 ms apart as
worker pools do, under worker ids ``bench-0``..``bench-9`` (half with ``max_attempts`` 1, so a
reap pass writes both ``retrying`` and ``dead`` rows).  Then a fake clock moves past the leases'
expiry and ``repository.reap(now=..., limit=--batch)`` is timed, called until a pass comes back
short: the work of the worker's reaper (``Reaper.run_once``) without its logging.  Reported per round: seconds, jobs/s and the SQL statements the reaps sent (counted by a
SQLAlchemy ``before_cursor_execute`` hook); the median of the rounds last.  A figure, not a test:
nothing is asserted, but jobs not taken back are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from typing import Any

from sqlalchemy import event
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import open_repository
from tether.domain.job import JobStatus
from tether.domain.validation import prepare_job

DEFAULT_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
LEASE_BATCH = 1_000
#: Jobs per lease statement while setting up (a worker pool leases about this many at once).
LEASE_K = 10


def _round(url: str, jobs: int, batch: int) -> dict[str, Any]:
    postgres = url.startswith("postgres")
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}" if postgres else None
    repo = open_repository(url, schema=schema) if postgres else open_repository(url)
    try:
        if not postgres:
            repo.drop_schema()
            repo.create_schema()
        clock = FakeClock()
        new = [prepare_job("bench.reap", {"i": i}, now=clock.now(), max_attempts=1 + 2 * (i % 2)) for i in range(jobs)]
        for start in range(0, jobs, LEASE_BATCH):
            repo.enqueue_many(new[start : start + LEASE_BATCH], now=clock.now())
        leased = 0
        while leased < jobs:  # as pools lease: a few jobs per statement, at distinct instants
            got = repo.lease(queues=None, worker_id=f"bench-{leased // LEASE_BATCH % 10}", now=clock.advance(0.001),
                             lease_timeout=60, limit=LEASE_K)
            if not got:
                break
            leased += len(got)
        now = clock.advance(61)
        statements = 0

        def count(*_: Any) -> None:
            nonlocal statements
            statements += 1

        event.listen(repo.engine, "before_cursor_execute", count)
        started = time.perf_counter()
        reaped = 0
        while True:
            passed = repo.reap(now=now, limit=batch)
            reaped += len(passed)
            if len(passed) < batch:
                break
        seconds = time.perf_counter() - started
        event.remove(repo.engine, "before_cursor_execute", count)
        counts = repo.count_by_status()
        return {
            "jobs": jobs, "leased": leased, "reaped": reaped, "batch": batch, "seconds": round(seconds, 4),
            "jobs_per_s": round(reaped / seconds, 1) if seconds else None, "statements": statements,
            "retrying": counts.get(JobStatus.RETRYING, 0), "dead": counts.get(JobStatus.DEAD, 0),
            "still_running": counts.get(JobStatus.RUNNING, 0),
        }
    finally:
        if postgres:
            repo.drop_schema()
        repo.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--jobs", type=int, default=10_000, help="expired leases to take back (default 10,000)")
    parser.add_argument("--batch", type=int, default=100, help="limit of one reap pass (default 100, the worker's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    rounds = [_round(args.database_url, args.jobs, args.batch) for _ in range(args.rounds)]
    median = statistics.median(r["jobs_per_s"] for r in rounds if r["jobs_per_s"])
    if args.json:
        print(json.dumps({"rounds": rounds, "median_jobs_per_s": median}))
        return
    for number, r in enumerate(rounds, 1):
        print(f"round {number}: reaped {r['reaped']:,} of {r['jobs']:,} expired leases in passes of {r['batch']}: "
              f"{r['seconds']:.3f} s, {r['jobs_per_s']:,.0f} jobs/s, {r['statements']:,} statements "
              f"({r['retrying']:,} retrying, {r['dead']:,} dead, {r['still_running']:,} still running)")
    print(f"median: {median:,.0f} jobs/s")


if __name__ == "__main__":
    main()
