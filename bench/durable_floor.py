"""The floor of Tether's Redis dispatch design: w2 latency with raw drivers and no Tether code.

    .venv/bin/python bench/durable_floor.py                    # lease committed durably, as Tether does
    .venv/bin/python bench/durable_floor.py --lease-commit off  # lease under synchronous_commit = off

What it measures is the least any queue can take that (a) makes a job durable in PostgreSQL
before anyone hears of it, (b) wakes an idle worker through a Redis Streams consumer group, and
(c) has the worker lease the job in PostgreSQL (``FOR UPDATE SKIP LOCKED``, one statement,
committed) before its handler starts — the three rules of Tether's Redis dispatcher.  Per job:

    producer:  INSERT ... RETURNING id   (psycopg, autocommit: one durable commit)
               XADD <stream> * id <id>   (redis-py)
    worker:    XREADGROUP ... BLOCK      (redis-py, separate process)
               WITH chosen AS (SELECT ... FOR UPDATE SKIP LOCKED) UPDATE ... RETURNING
               write "<i> <time.time()>" to a marks file   (the "handler start")

Latency is the mark minus the moment just before the INSERT, as in peerbench's ``w2`` and
``bench/latency.py`` (one idle worker, ``--jobs`` jobs ``--interval`` seconds apart, warm-up
first).  Statements are prepared; the table is a stand-in with the columns the lease needs.
``bench/latency.py --peers`` prints this row beside Tether and the peers.  A figure, not a test.
Uses a schema and stream of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from benchutil import percentile

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
GROUP = "floor"
STOP = -1


def _lease_sql(schema: str) -> str:
    return (
        f"WITH chosen AS (SELECT id FROM {schema}.jobs WHERE status = 'queued' AND scheduled_at <= now() "
        f"ORDER BY priority DESC, scheduled_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
        f"UPDATE {schema}.jobs AS j SET status = 'running', attempts = j.attempts + 1, "
        f"lease_token = md5(%s || j.id::text), lease_expires_at = now() + interval '30 seconds' "
        f"FROM chosen WHERE j.id = chosen.id RETURNING j.id, j.payload"
    )


def worker(dsn: str, redis_url: str, schema: str, marks: str, lease_commit: str) -> None:
    """Read the stream, lease one job per entry, write a mark; stops at the payload ``i == -1``."""
    import psycopg
    import redis

    options = "-c synchronous_commit=off" if lease_commit == "off" else ""
    conn = psycopg.connect(dsn, autocommit=True, options=options)
    client = redis.Redis.from_url(redis_url)
    fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lease = _lease_sql(schema)
    while True:
        if not client.xreadgroup(GROUP, "c1", {schema: ">"}, count=1, block=5000):
            continue
        row = conn.execute(lease, [uuid.uuid4().hex], prepare=True).fetchone()
        if row is None:
            continue
        i = row[1]["i"]
        os.write(fd, f"{i} {time.time():.6f}\n".encode())
        if i == STOP:
            return


def measure(dsn: str, redis_url: str, jobs: int, interval: float, lease_commit: str) -> dict[str, Any]:
    """Run the floor once: ``jobs`` jobs enqueued ``interval`` seconds apart, the worker's lease
    committed durably (``lease_commit="on"``) or under ``synchronous_commit = off`` (``"off"``).
    Returns a row shaped like ``bench/latency.py``'s (latencies in milliseconds)."""
    import psycopg
    import redis
    from psycopg.types.json import Jsonb

    schema = f"tether_floor_{uuid.uuid4().hex[:8]}"
    conn = psycopg.connect(dsn, autocommit=True)
    client = redis.Redis.from_url(redis_url)
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(
        f"CREATE TABLE {schema}.jobs (id bigserial PRIMARY KEY, status text NOT NULL, priority int NOT NULL DEFAULT 0, "
        "scheduled_at timestamptz NOT NULL DEFAULT now(), attempts int NOT NULL DEFAULT 0, lease_token text, "
        "lease_expires_at timestamptz, payload jsonb NOT NULL)"
    )
    conn.execute(f"CREATE INDEX ON {schema}.jobs (priority DESC, scheduled_at, id) WHERE status = 'queued'")
    client.xgroup_create(schema, GROUP, id="0", mkstream=True)
    insert = f"INSERT INTO {schema}.jobs (status, payload) VALUES ('queued', %s) RETURNING id"

    def enqueue(i: int) -> None:
        (job_id,) = conn.execute(insert, [Jsonb({"i": i})], prepare=True).fetchone()  # type: ignore[misc]
        client.xadd(schema, {"id": job_id})

    with tempfile.TemporaryDirectory(prefix="tether-floor-") as folder:
        marks = os.path.join(folder, "marks")
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "worker", "--dsn", dsn,
                                 "--redis-url", redis_url, "--schema", schema, "--marks", marks,
                                 "--lease-commit", lease_commit])
        try:
            for i in range(3):  # warm-up, as latency.py does
                enqueue(1_000_000 + i)
                time.sleep(0.05)
            time.sleep(1.0)
            calls: list[float] = []
            start = time.time() + 0.05
            for i in range(jobs):
                delay = start + i * interval - time.time()
                if delay > 0:
                    time.sleep(delay)
                calls.append(time.time())
                enqueue(i)
            enqueue(STOP)
            proc.wait(timeout=60)
            seen: dict[int, float] = {}
            with open(marks) as f:
                for line in f:
                    i_text, t_text = line.split()
                    seen[int(i_text)] = float(t_text)
        finally:
            if proc.poll() is None:
                proc.kill()
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            client.delete(schema)
            conn.close()
            client.close()
    lat = [(seen[i] - calls[i]) * 1000 for i in range(jobs) if i in seen]
    return {
        "backend": "floor", "dispatcher": f"pg+redis lease {'async' if lease_commit == 'off' else 'durable'}",
        "jobs": jobs, "worker": "separate process", "missing": jobs - len(lat),
        "p50_ms": round(percentile(lat, 50), 2), "p95_ms": round(percentile(lat, 95), 2),
        "p99_ms": round(percentile(lat, 99), 2), "max_ms": round(max(lat), 2),
    }


def dsn_of(url: str) -> str:
    """A libpq DSN from an SQLAlchemy-style URL (``postgresql+psycopg://`` → ``postgresql://``)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=["driver", "worker"], default="driver")
    p.add_argument("--dsn", default=dsn_of(os.environ.get("TETHER_TEST_DATABASE_URL", DEFAULT_DSN)))
    p.add_argument("--redis-url", default=os.environ.get("TETHER_TEST_REDIS_URL", DEFAULT_REDIS))
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--interval", type=float, default=0.02, help="seconds between two enqueues")
    p.add_argument("--lease-commit", choices=["on", "off"], default="on",
                   help="synchronous_commit of the worker's lease (Tether: on)")
    p.add_argument("--schema")
    p.add_argument("--marks")
    args = p.parse_args()
    if args.role == "worker":
        worker(args.dsn, args.redis_url, args.schema, args.marks, args.lease_commit)
        return
    row = measure(args.dsn, args.redis_url, args.jobs, args.interval, args.lease_commit)
    print(f"{row['dispatcher']}: p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, p99 {row['p99_ms']} ms, "
          f"max {row['max_ms']} ms, missing {row['missing']}")


if __name__ == "__main__":
    main()
