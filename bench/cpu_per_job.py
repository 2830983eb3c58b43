"""CPU time per job on PostgreSQL, worker side and server side: a figure that a busy machine disturbs far less than a drain rate.

    .venv/bin/python bench/cpu_per_job.py                        # both modes, 20,000 jobs
    .venv/bin/python bench/cpu_per_job.py --mode pool --jobs 30000
    .venv/bin/python bench/cpu_per_job.py --base ../tether-base --rounds 3   # and another checkout, alternating

Modes:

- **repository**: one thread leases 16 jobs, then calls ``complete_and_lease`` with the 16 it
  holds until the queue is empty: the hot statements alone, no worker pool.
- **pool**: an in-process worker pool (16 threads, polling) drains the jobs with a no-op handler
  and stops when idle.

Each prints the process's CPU time per job (``time.process_time``: every thread of this process,
the pool's included) and the CPU time per job of the PostgreSQL backends that ran this run's
statements (``/proc/<pid>/stat`` of each backend whose last statement named this run's schema),
both in microseconds, and the wall time per job.  Throughput on a shared 2-core machine swings by
a third from run to run; CPU time per job moves by a few percent, so it is the figure to compare
two commits with while other work runs (``--base``).  The drain rate of record is still
``bench/compare_commits.py``'s, on a quiet machine.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BATCH = 16


def _backend_cpu(monitor: Any, schema: str) -> float:
    """CPU seconds used so far by the backends whose last statement named ``schema``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for (pid,) in monitor.execute("SELECT pid FROM pg_stat_activity WHERE query LIKE %s", (f"%{schema}%",)):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return total / tick


def measure(mode: str, jobs: int, database_url: str) -> dict[str, Any]:
    """One run of ``mode`` over ``jobs`` jobs on a schema of its own (dropped at the end)."""
    import psycopg
    import tether
    from sqlalchemy.engine import make_url
    from tether.entrypoints.service import EnqueueRequest

    schema = f"tether_cpu_{uuid.uuid4().hex[:8]}"
    app = tether.connect(database_url, schema=schema, poll_interval=0.05)
    url = make_url(database_url)
    monitor = psycopg.connect(
        host=url.host or "127.0.0.1", port=url.port or 5432, user=url.username, dbname=url.database, autocommit=True
    )
    try:
        requests = [EnqueueRequest("bench.noop", {"i": i}) for i in range(jobs)]
        for k in range(0, jobs, 1000):
            app.enqueue_many(requests[k : k + 1000])
        repository = app.repository
        if mode == "repository":
            def now() -> datetime:
                return datetime.now(UTC)

            held = repository.lease(queues=None, worker_id="bench", now=now(), lease_timeout=60, limit=BATCH)
            server0, cpu0, wall0 = _backend_cpu(monitor, schema), time.process_time(), time.perf_counter()
            done = 0
            while held:
                items = [(job.id, job.lease_token) for job in held]
                answers, held = repository.complete_and_lease(
                    items, now=now(), queues=None, worker_id="bench", lease_timeout=60, limit=BATCH
                )
                done += len(answers)
        else:
            @app.handler("bench.noop")
            def noop(payload: dict[str, Any]) -> None:
                return None

            server0, cpu0, wall0 = _backend_cpu(monitor, schema), time.process_time(), time.perf_counter()
            app.worker(concurrency=BATCH).run(stop_when_idle=True)
            done = app.counts()[tether.JobStatus.COMPLETED]
        cpu1, wall1, server1 = time.process_time(), time.perf_counter(), _backend_cpu(monitor, schema)
        done = max(done, 1)
        return {
            "mode": mode, "jobs": done, "process_us_per_job": round(1e6 * (cpu1 - cpu0) / done, 1),
            "server_us_per_job": round(1e6 * (server1 - server0) / done, 1),
            "wall_us_per_job": round(1e6 * (wall1 - wall0) / done, 1), "load1": round(os.getloadavg()[0], 1),
        }
    finally:
        monitor.close()
        app.repository.drop_schema()
        app.close()


def _run_checkout(checkout: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One :func:`measure` in ``checkout``'s own virtualenv (this very script, run from here)."""
    python = os.path.join(checkout, ".venv", "bin", "python")
    out = subprocess.run(
        [python, os.path.abspath(__file__), "--one", mode, "--jobs", str(args.jobs), "--database-url", args.database_url],
        check=True, capture_output=True, text=True, cwd=checkout,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["repository", "pool", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--base", help="another checkout (with its .venv) to measure in the same run, alternating")
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one measurement, as JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.jobs, args.database_url)))
        return
    modes = ["repository", "pool"] if args.mode == "both" else [args.mode]
    sides = {"this": os.path.dirname(HERE)}
    if args.base:
        sides["base"] = os.path.abspath(args.base)
    for mode in modes:
        got: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for round_no in range(args.rounds):
            order = list(sides) if round_no % 2 == 0 else list(reversed(sides))
            for side in order:
                result = _run_checkout(sides[side], mode, args)
                got[side].append(result)
                print(f"{mode} {side}: process {result['process_us_per_job']} us/job, server "
                      f"{result['server_us_per_job']} us/job, wall {result['wall_us_per_job']} us/job "
                      f"(load {result['load1']})", flush=True)
        for side, results in got.items():
            process = statistics.median(r["process_us_per_job"] for r in results)
            server = statistics.median(r["server_us_per_job"] for r in results)
            print(f"{mode} {side} median: process {process:.1f} + server {server:.1f} = {process + server:.1f} us/job")


if __name__ == "__main__":
    sys.exit(main())
