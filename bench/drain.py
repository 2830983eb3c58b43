"""Drain benchmark: bulk-enqueue N no-op jobs, then drain them with one WorkerPool; print jobs/s.

    .venv/bin/python bench/drain.py                      # 20,000 jobs on memory and on SQLite
    .venv/bin/python bench/drain.py --backend sqlite --jobs 5000 --concurrency 8
    .venv/bin/python bench/drain.py --backend postgres   # needs TETHER_TEST_DATABASE_URL's server

Each backend starts empty (SQLite: a file in a temporary folder; PostgreSQL: a schema of its own,
dropped afterwards).  Enqueue uses ``enqueue_many`` in batches of ``--batch``; the drain runs
``WorkerPool.run(stop_when_idle=True)`` with the polling dispatcher and counts from the first
lease to the pool's return.  A figure, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tether
from tether.domain.job import JobStatus
from tether.entrypoints.service import EnqueueRequest

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def open_backend(backend: str) -> Iterator[Any]:
    if backend == "memory":
        app = tether.connect("memory://", poll_interval=0.05)
        try:
            yield app
        finally:
            app.close()
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="tether-bench-") as folder:
            app = tether.connect(f"sqlite:///{os.path.join(folder, 'bench.db')}", poll_interval=0.05)
            try:
                yield app
            finally:
                app.close()
    elif backend == "postgres":
        url = os.environ.get("TETHER_TEST_DATABASE_URL", DEFAULT_POSTGRES)
        schema = f"tether_bench_{uuid.uuid4().hex[:8]}"
        app = tether.connect(url, schema=schema, poll_interval=0.05)
        try:
            yield app
        finally:
            drop = getattr(app.repository, "drop_schema", None)
            if drop is not None:
                drop()
            app.close()
    else:  # pragma: no cover - argparse restricts the choices
        raise SystemExit(f"unknown backend {backend!r}")


def run(backend: str, jobs: int, concurrency: int, batch: int, single_jobs: int = 0) -> dict[str, float]:
    with open_backend(backend) as app:
        app.handler("bench.noop")(lambda payload: None)
        requests = [EnqueueRequest("bench.noop", {"i": i}) for i in range(jobs)]
        started = time.perf_counter()
        for start in range(0, jobs, batch):
            app.enqueue_many(requests[start : start + batch])
        enqueue_seconds = time.perf_counter() - started

        pool = app.worker(concurrency=concurrency, max_wait=0.05, reap_interval=60.0)
        started = time.perf_counter()
        stats = pool.run(stop_when_idle=True, install_signal_handlers=False)
        drain_seconds = time.perf_counter() - started
        counts = app.counts()
        if counts[JobStatus.COMPLETED] != jobs:
            print(f"  warning: {counts[JobStatus.COMPLETED]} of {jobs} completed ({dict(counts)}, {stats})", file=sys.stderr)
        figures = {
            "enqueue_per_s": jobs / enqueue_seconds,
            "drain_per_s": jobs / drain_seconds,
            "drain_s": drain_seconds,
        }
        if single_jobs:  # one enqueue call per job, no worker running
            started = time.perf_counter()
            for i in range(single_jobs):
                app.enqueue("bench.noop", {"i": i})
            figures["single_per_s"] = single_jobs / (time.perf_counter() - started)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs to enqueue and drain (default 20000)")
    parser.add_argument(
        "--backend",
        choices=("memory", "sqlite", "postgres", "all"),
        action="append",
        help="repeat for several; default memory and sqlite; 'all' adds postgres",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="worker threads (default 4)")
    parser.add_argument("--batch", type=int, default=1000, help="enqueue_many batch size (default 1000)")
    parser.add_argument("--single-jobs", type=int, default=0, help="also time this many single enqueue calls (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per backend instead of a table")
    args = parser.parse_args(argv)
    backends = args.backend or ["memory", "sqlite"]
    if "all" in backends:
        backends = ["memory", "sqlite", "postgres"]
    if args.json:
        for backend in backends:
            figures = run(backend, args.jobs, args.concurrency, args.batch, args.single_jobs)
            print(json.dumps({"backend": backend, "concurrency": args.concurrency, "jobs": args.jobs, **figures}))
        return
    print(
        f"tether drain bench: {args.jobs:,} no-op jobs, {args.concurrency} worker threads, "
        f"enqueue_many batches of {args.batch}; Python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPU(s)"
    )
    print(f"{'backend':<10} {'bulk enqueue jobs/s':>20} {'drain jobs/s':>14} {'drain s':>9}")
    for backend in backends:
        figures = run(backend, args.jobs, args.concurrency, args.batch, args.single_jobs)
        print(f"{backend:<10} {figures['enqueue_per_s']:>20,.0f} {figures['drain_per_s']:>14,.0f} {figures['drain_s']:>9.2f}")


if __name__ == "__main__":
    main()
