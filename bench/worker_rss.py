"""A worker's resident memory as it runs more and more jobs: flat from 10,000 to 100,000 jobs.

    .venv/bin/python bench/worker_rss.py                                  # 100,000 jobs, marks 1k/10k/100k
    .venv/bin/python bench/worker_rss.py --jobs 20000 --marks 1000,10000,20000
    .venv/bin/python bench/worker_rss.py --pools 10                       # a new pool for every tenth

The jobs are stored on PostgreSQL (``--database-url``, default ``TETHER_TEST_DATABASE_URL``, in a
schema of its own dropped at the end), so the store's rows are not in the worker's memory: what
grows here is the worker's.  They are enqueued first (bulk), then this process runs one worker
pool (``--concurrency`` threads, no-op handler) until all are done, or ``--pools`` pools one
after the other, each running its share (a long-lived process that starts pools again and
again).  It prints the RSS (``/proc/self/statm``, MiB) when the completed count passes each mark,
after a ``gc.collect()``, and the growth between the last two marks.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import threading
import time
import uuid
from typing import Any

import tether
from tether.entrypoints.service import EnqueueRequest

DEFAULT_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    """This process's resident set size now, in MiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def run(args: argparse.Namespace) -> dict[str, Any]:
    marks = sorted(int(m) for m in args.marks.split(","))
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}"
    app = tether.connect(args.database_url, schema=schema)
    done = 0
    lock = threading.Lock()
    passed = threading.Condition(lock)

    @app.handler("bench.rss")
    def noop(payload: dict[str, Any]) -> None:
        nonlocal done
        with lock:
            done += 1
            if done in marks:
                passed.notify_all()

    try:
        for start in range(0, args.jobs, 5_000):
            app.enqueue_many([EnqueueRequest("bench.rss", {"n": n}) for n in range(start, min(start + 5_000, args.jobs))])
        figures: dict[int, float] = {}
        per_pool = -(-args.jobs // args.pools)
        began = time.monotonic()
        for _ in range(args.pools):
            target = min(args.jobs, done + per_pool)
            pool = app.worker(concurrency=args.concurrency)
            pool.start()
            while True:
                with lock:
                    while done < target and not any(done >= m and m not in figures for m in marks):
                        passed.wait(0.5)
                    reached = [m for m in marks if done >= m and m not in figures]
                    finished = done >= target
                for mark in reached:
                    gc.collect()
                    figures[mark] = round(rss_mib(), 1)
                    print(f"{mark:>8} jobs: RSS {figures[mark]:7.1f} MiB", flush=True)
                if finished:
                    break
            pool.stop()
            del pool
        seconds = time.monotonic() - began
    finally:
        app.repository.drop_schema()
        app.close()
    last, before = marks[-1], marks[-2] if len(marks) > 1 else marks[-1]
    growth = round(figures.get(last, 0.0) - figures.get(before, 0.0), 1)
    print(f"growth {before} -> {last} jobs: {growth:+.1f} MiB ({args.pools} pool(s), {args.jobs / seconds:.0f} jobs/s)")
    return {"rss_mib": figures, "growth_mib": growth, "pools": args.pools, "jobs": args.jobs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--marks", default="1000,10000,100000", help="completed counts to print the RSS at")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pools", type=int, default=1, help="pools run one after the other, each its share")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
