"""Dashboard pages benchmark: p50/p99 of each page with N jobs in PostgreSQL (default 1,000,000).

    .venv/bin/python bench/dashboard_pages.py                       # 1,000,000 jobs, 30 requests per page
    .venv/bin/python bench/dashboard_pages.py --jobs 200000 --requests 20
    .venv/bin/python bench/dashboard_pages.py --json                # one JSON line

The table is filled in one ``INSERT … SELECT generate_series`` on a fresh schema
(``tether_bench_<random>``, dropped at the end) and analyzed, as autovacuum would: 90 % completed
(finished over the last two days), 2 % cancelled, 1 % dead, 5 % queued over five queues (half of
them due), 1 % retrying, 1 % running; one job in a hundred has an idempotency key.  Each page is
then requested through Starlette's TestClient (routing, the guards, the reads and the template
rendering; no network), the first request not counted.  The overview and the queues page render
the live feed's shared snapshot (taken in the background once per period, whatever the number of
pages open), so the snapshot's own cost is measured last, by itself, with the chart read every
time (incrementally, as the dashboard reads it: its last minutes), then the chart's first read (the
whole hour, as after a start and every five minutes), and the queue summaries alone (what
``/metrics`` reads on each scrape).  A figure, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

import tether
from benchutil import percentile
from starlette.testclient import TestClient
from tether.entrypoints.web import snapshot
from tether.entrypoints.web.chart_minutes import ChartMinutes
from tether.web import create_app

DEFAULT_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

FILL = """
INSERT INTO {table} (job_type, queue, payload, priority, status, attempts, max_attempts, scheduled_at, created_at,
                     idempotency_key, lease_token, leased_by, leased_at, lease_expires_at, last_error, finished_at)
SELECT 'bench.' || chr(97 + mod(i, 4)), 'q' || mod(i, 5), '{{"i": ' || i || ', "note": "payload of a benchmark job"}}',
       0, s.status,
       CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END, 3,
       CASE WHEN s.status = 'queued' AND mod(i, 2) = 0 THEN now() + interval '1 hour' ELSE now() - (mod(i, 3600) || ' s')::interval END,
       now() - interval '2 days',
       CASE WHEN mod(i, 100) = 0 THEN 'key-' || i END,
       CASE WHEN s.status = 'running' THEN md5(i::text) END,
       CASE WHEN s.status = 'running' THEN 'bench-worker' END,
       CASE WHEN s.status = 'running' THEN now() END,
       CASE WHEN s.status = 'running' THEN now() + interval '5 minutes' END,
       CASE WHEN s.status IN ('dead', 'retrying') THEN 'ValueError: benchmark failure ' || i END,
       CASE WHEN s.status IN ('completed', 'dead', 'cancelled') THEN now() - (mod(i::bigint * 7919, 172800) || ' s')::interval END
FROM generate_series(1, {jobs}) AS i
CROSS JOIN LATERAL (SELECT CASE
    WHEN mod(i, 100) < 90 THEN 'completed' WHEN mod(i, 100) < 92 THEN 'cancelled' WHEN mod(i, 100) < 93 THEN 'dead'
    WHEN mod(i, 100) < 98 THEN 'queued' WHEN mod(i, 100) < 99 THEN 'retrying' ELSE 'running' END AS status) AS s
"""


def pages(jobs: int) -> list[str]:
    middle = jobs // 2
    return [
        "/",
        "/jobs",
        "/jobs?status=queued",
        "/jobs?status=running",
        "/jobs?status=dead",
        "/jobs?queue=q3",
        "/jobs?job_type=bench.b&queue=q1",
        f"/jobs?before={middle}",
        f"/jobs/{middle}",
        f"/jobs?find=key-{(middle // 100) * 100}",
        "/queues",
        "/workers",
        "/schedules",
        "/metrics",
    ]


def run(url: str, jobs: int, requests: int) -> dict[str, Any]:
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}"
    app = tether.connect(url, schema=schema)
    try:
        table = f'"{schema}".tether_jobs'
        started = time.perf_counter()
        with app.repository.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql(FILL.format(table=table, jobs=jobs))
        with app.repository.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
        fill_seconds = time.perf_counter() - started
        web = create_app(app, username="bench", password="bench")
        client = TestClient(web, base_url="http://bench")
        client.auth = ("bench", "bench")
        results: dict[str, Any] = {}
        for path in pages(jobs):
            times = []
            for n in range(requests + 1):
                t0 = time.perf_counter()
                answer = client.get(path, follow_redirects=False)
                elapsed = (time.perf_counter() - t0) * 1000
                if answer.status_code not in (200, 303):
                    raise SystemExit(f"{path}: HTTP {answer.status_code}: {answer.text[:300]}")
                if n:
                    times.append(elapsed)
            results[path] = {"p50_ms": round(percentile(times, 50), 1), "p99_ms": round(percentile(times, 99), 1)}
        snapshot.THROUGHPUT_REFRESH = 0.0  # the chart read every time too
        reader = web.state.dashboard.reader
        times = []
        for n in range(requests + 1):
            t0 = time.perf_counter()
            reader.snapshot()
            if n:
                times.append((time.perf_counter() - t0) * 1000)
        results["(snapshot: totals, queues, chart, workers)"] = {
            "p50_ms": round(percentile(times, 50), 1), "p99_ms": round(percentile(times, 99), 1)}
        times = []
        for n in range(requests + 1):
            minutes = ChartMinutes(reader.overview, max_rows=reader.finished_rows)
            t0 = time.perf_counter()
            minutes.read(app.clock.now())
            if n:
                times.append((time.perf_counter() - t0) * 1000)
        results["(chart, first read: the whole hour)"] = {
            "p50_ms": round(percentile(times, 50), 1), "p99_ms": round(percentile(times, 99), 1)}
        times = []
        for n in range(requests + 1):
            t0 = time.perf_counter()
            app.queue_summaries()
            if n:
                times.append((time.perf_counter() - t0) * 1000)
        results["(queue summaries: the live partial indexes)"] = {
            "p50_ms": round(percentile(times, 50), 1), "p99_ms": round(percentile(times, 99), 1)}
        return {"jobs": jobs, "requests_per_page": requests, "fill_seconds": round(fill_seconds, 1), "pages": results}
    finally:
        app.repository.drop_schema()  # type: ignore[attr-defined]
        app.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.database_url.startswith("postgresql"):
        sys.exit("dashboard_pages: a PostgreSQL URL is required")
    result = run(args.database_url, args.jobs, args.requests)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['jobs']:,} jobs (filled and analyzed in {result['fill_seconds']} s), "
          f"{result['requests_per_page']} requests per page")
    for path, figures in result["pages"].items():
        print(f"  {path:45} p50 {figures['p50_ms']:7.1f} ms   p99 {figures['p99_ms']:7.1f} ms")


if __name__ == "__main__":
    main()
