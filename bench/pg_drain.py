"""Multi-process drain benchmark (issue 3's workload w1) on PostgreSQL or a SQLite file.

    .venv/bin/python bench/pg_drain.py                              # 20,000 jobs, 2 processes x 10 threads
    .venv/bin/python bench/pg_drain.py --workers 2 --concurrency 16 --jobs 20000
    .venv/bin/python bench/pg_drain.py --database-url sqlite:////tmp/bench.db --workers 1
    .venv/bin/python bench/pg_drain.py --json                       # one JSON line (for compare_peers.py)
    .venv/bin/python bench/pg_drain.py --bulk-only --rounds 5       # step 1 alone, 5 fresh schemas (median)
    .venv/bin/python bench/pg_drain.py --redis-url redis://127.0.0.1:6379/0   # dispatch by Redis Streams
    .venv/bin/python bench/pg_drain.py --observe                    # with metrics and tracing on
    .venv/bin/python bench/pg_drain.py --observe metrics            # metrics alone (or: tracing)
    .venv/bin/python bench/pg_drain.py --observe span               # one SDK span per job in the handler
    .venv/bin/python bench/pg_drain.py --handler-cpu 0.0005         # each handler computes 0.5 ms
    .venv/bin/python bench/pg_drain.py --async-handlers --async-concurrency 100   # async def no-op handlers
    .venv/bin/python bench/pg_drain.py --async-handlers --sleep 0.05 --async-concurrency 500 --workers 1 --jobs 10000
    .venv/bin/python bench/pg_drain.py --max-running 50             # the queue limited to 50 running jobs
    .venv/bin/python bench/pg_drain.py --keys 100 --max-running-per-key 1   # 100 concurrency keys, 1 running each

Steps, timed the way the peer benchmarks time them (see /work/shared/peerbench/README.md):

1. **bulk**: ``enqueue_many`` of ``--jobs`` no-op jobs in chunks of ``--chunk`` (1,000).
2. **w1 drain**: ``--workers`` worker processes (``tether.connect`` + ``app.worker(concurrency=...)``,
   polling dispatcher, or Redis Streams with ``--redis-url``: the bulk enqueue then publishes every
   job too) start; every handler appends one fixed-width line with its start time to a
   file of its process.  The drain time runs from the first handler start until the database
   reports every job ``completed``; start-up is reported apart.
3. **single**: ``--single-jobs`` jobs enqueued one ``enqueue`` call each, no worker running.

``--observe`` turns metrics and tracing on (see :func:`observe`; ``--observe metrics`` or
``--observe tracing`` one of them): the producer traces its enqueues (each job then carries a
trace context), every worker exports Prometheus metrics and traces each job to an OpenTelemetry
SDK whose exporter drops the spans.
``--observe span`` is the floor of tracing, not Tether's: no Tether tracing at all, but every
handler opens and ends one span of the same SDK set-up itself (named and attributed as a
``process`` span, current while it runs), as a handler-side instrumentation would.
``--handler-cpu S`` makes every handler compute for ``S`` seconds of its thread's CPU after its
mark (a job with work to do, rather than a no-op).

With ``--async-handlers`` the handler is ``async def`` (run on each pool's event loop, up to
``--async-concurrency`` at once); ``--sleep S`` makes it ``await asyncio.sleep(S)`` after its mark.

``--bulk-only`` runs step 1 alone (``--rounds`` times, each on a fresh schema) and reports every
round and the median.  PostgreSQL runs use a schema of their own (``tether_bench_<random>``), dropped at the end;
SQLite runs a file the caller names.  A figure, not a test: nothing is asserted, but
``duplicate_starts`` (handler starts beyond one per job) and any job not completed are reported.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import tether
from benchutil import delete_redis_keys
from tether.domain.job import JobStatus
from tether.entrypoints.service import EnqueueRequest

DEFAULT_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MARK = "%10d %17.6f\n"  # job number, handler start (time.time()); 29 bytes a line
MARK_BYTES = 29


def _connect(url: str, schema: str | None, redis_url: str | None = None, prefix: str | None = None) -> Any:
    options: dict[str, Any] = {"poll_interval": 0.05}
    if schema:
        options["schema"] = schema
    if redis_url:
        options.update(redis_url=redis_url, redis_options={"prefix": prefix})
    return tether.connect(url, **options)


def observe(app: Any, what: str = "both", sample: float = 1.0) -> list[Any]:
    """Tracing on for ``app`` unless ``what`` is ``metrics`` (an SDK provider, a batch processor,
    an exporter that drops every span: the cost of making and handing spans, not of shipping
    them; ``sample``: the share of traces recorded, by a ratio sampler); returns the pool observers (Prometheus metrics on a registry of their own, unless
    ``what`` is ``tracing``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from prometheus_client import CollectorRegistry
    from tether.metrics import WorkerMetrics
    from tether.tracing import instrument

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    if what != "metrics":
        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(sample)))
        provider.add_span_processor(BatchSpanProcessor(Dropping()))
        if what == "span":  # the floor: the handler makes its span itself (see handler_span)
            return [provider.get_tracer("bench")]
        instrument(app, tracer_provider=provider)
    return [] if what == "tracing" else [WorkerMetrics(CollectorRegistry())]


def handler_span(tracer: Any) -> Any:
    """A context manager opening one ``process`` span of ``tracer`` per call, with the sampling
    attributes Tether's own process span opens with, current while the body runs."""
    from opentelemetry.trace import SpanKind

    attributes = {"messaging.system": "tether", "messaging.destination.name": "default",
                  "messaging.operation.type": "process", "messaging.operation.name": "process"}
    return lambda: tracer.start_as_current_span("process default", kind=SpanKind.CONSUMER, attributes=attributes)


def compute(seconds: float) -> None:
    """Spin until this thread has used ``seconds`` more CPU (a handler with work to do)."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def worker_main(args: argparse.Namespace) -> None:
    """One worker process: run a pool until SIGTERM."""
    app = _connect(args.database_url, args.schema, args.redis_url, args.redis_prefix)
    observers = observe(app, args.observe, args.sample) if args.observe else None
    span = None
    if args.observe == "span" and observers:
        span, observers = handler_span(observers[0]), None
    work = args.handler_cpu
    fd = os.open(os.path.join(args.marks, f"m.{os.getpid()}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    if args.async_handlers:
        import asyncio

        sleep = args.sleep

        @app.handler("bench.noop")
        async def async_noop(payload: dict[str, Any]) -> None:
            os.write(fd, (MARK % (payload["i"], time.time())).encode())
            if sleep:
                await asyncio.sleep(sleep)
    elif span is not None:
        @app.handler("bench.noop")
        def noop_in_span(payload: dict[str, Any]) -> None:
            with span():
                os.write(fd, (MARK % (payload["i"], time.time())).encode())
                if work:
                    compute(work)
    else:
        @app.handler("bench.noop")
        def noop(payload: dict[str, Any]) -> None:
            os.write(fd, (MARK % (payload["i"], time.time())).encode())
            if work:
                compute(work)

    options: dict[str, Any] = {"async_concurrency": args.async_concurrency} if args.async_handlers else {}
    pool = app.worker(concurrency=args.concurrency, max_wait=0.5, reap_interval=60.0, drain_timeout=5.0,
                      prefetch=args.prefetch, observers=observers, **options)
    cpu_at_start = time.process_time()  # imports and set-up done: what follows is the pool's work
    stats = pool.run(install_signal_handlers=True)
    with open(os.path.join(args.marks, f"cpu.{os.getpid()}"), "w") as f:
        f.write(f"{time.process_time() - cpu_at_start:.6f}\n")
    batcher = getattr(pool, "_completions", None)
    if args.verbose and batcher is not None:
        print(f"worker {os.getpid()}: {stats}; completion flushes {batcher.flushes}, mean batch "
              f"{batcher.items / max(batcher.flushes, 1):.1f}, jobs leased by flushes {batcher.leased}", file=sys.stderr)
    app.close()


def _run_cpu(folder: str) -> float:
    """CPU seconds the worker processes spent from their pool's start to its exit (imports and
    set-up excluded: tracing and metrics import more than the plain drain does)."""
    total = 0.0
    for path in glob.glob(os.path.join(folder, "cpu.*")):
        with open(path) as f:
            total += float(f.read() or 0)
    return total


def _marks(folder: str) -> tuple[int, float | None, int]:
    """(lines written, earliest start, duplicate starts) over every worker's mark file."""
    lines = 0
    first: float | None = None
    seen: set[int] = set()
    dups = 0
    for path in glob.glob(os.path.join(folder, "m.*")):
        with open(path, "rb") as f:
            data = f.read()
        for k in range(0, len(data) - MARK_BYTES + 1, MARK_BYTES):
            tag, at = data[k : k + MARK_BYTES].split()
            n, t = int(tag), float(at)
            lines += 1
            if n in seen:
                dups += 1
            seen.add(n)
            first = t if first is None or t < first else first
    return lines, first, dups


def _postgres_cpu_seconds() -> float | None:
    """CPU seconds used so far by every process named postgres on this machine (None off Linux)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)
            if b"(postgres" not in fields[0]:
                continue
            parts = fields[1].split()
            total += (int(parts[11]) + int(parts[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return total


def _lines(folder: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "m.*"))) // MARK_BYTES


def run(args: argparse.Namespace) -> dict[str, Any]:
    postgres = not args.database_url.startswith("sqlite")
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}" if postgres else None
    prefix = f"tether-bench-{uuid.uuid4().hex[:8]}"
    app = _connect(args.database_url, schema, args.redis_url, prefix)
    if args.observe in ("both", "tracing"):  # the producer traces its enqueues (not for metrics or span)
        observe(app, args.observe, args.sample)
    result: dict[str, Any] = {
        "peer": "tether", "backend": "postgres" if postgres else "sqlite", "workload": "w1",
        "dispatcher": "redis" if args.redis_url else "polling",
        "jobs": args.jobs, "workers": args.workers, "concurrency": args.concurrency, "prefetch": args.prefetch,
        "observe": args.observe, "handler_cpu_s": args.handler_cpu,
        "handlers": "async" if args.async_handlers else "sync", "async_concurrency": args.async_concurrency,
        "sleep": args.sleep,
        "python": platform.python_version(), "load1": os.getloadavg()[0],
    }
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="tether-marks-") as marks:
        try:
            if args.keys:  # each job a concurrency key, in turn
                requests = [EnqueueRequest("bench.noop", {"i": i}, concurrency_key=f"key-{i % args.keys}")
                            for i in range(args.jobs)]
            else:
                requests = [EnqueueRequest("bench.noop", {"i": i}) for i in range(args.jobs)]
            started = time.perf_counter()
            for k in range(0, args.jobs, args.chunk):
                app.enqueue_many(requests[k : k + args.chunk])
            result["enqueue_bulk_jobs_s"] = round(args.jobs / (time.perf_counter() - started), 1)
            if args.max_running is not None:  # the limited-queue path: at most N running across the workers
                app.limit_queue("default", max_running=args.max_running)
                result["max_running"] = args.max_running
            if args.max_running_per_key is not None:  # the limited path too: at most N of one key running
                app.limit_queue("default", max_running_per_key=args.max_running_per_key)
                result["max_running_per_key"], result["keys"] = args.max_running_per_key, args.keys

            pg_cpu_before = _postgres_cpu_seconds()
            spawn = time.time()
            command = [sys.executable, os.path.abspath(__file__), "--worker", "--database-url", args.database_url,
                       "--concurrency", str(args.concurrency), "--marks", marks] + (["--verbose"] if args.verbose else [])
            if args.prefetch is not None:
                command += ["--prefetch", str(args.prefetch)]
            if args.observe:
                command += ["--observe", args.observe, "--sample", str(args.sample)]
            if args.handler_cpu:
                command += ["--handler-cpu", str(args.handler_cpu)]
            if args.async_handlers:
                command += ["--async-handlers", "--async-concurrency", str(args.async_concurrency), "--sleep", str(args.sleep)]
            if args.redis_url:
                command += ["--redis-url", args.redis_url, "--redis-prefix", prefix]
            if schema:
                command += ["--schema", schema]
            procs = [subprocess.Popen(command) for _ in range(args.workers)]
            deadline = time.monotonic() + args.timeout
            while _lines(marks) < args.jobs and time.monotonic() < deadline:
                time.sleep(0.01)
            while time.monotonic() < deadline and app.counts()[JobStatus.COMPLETED] < args.jobs:
                time.sleep(0.01)
            finished = time.time()
            pg_cpu_after = _postgres_cpu_seconds()
            if pg_cpu_before is not None and pg_cpu_after is not None:
                result["pg_cpu_s"] = round(pg_cpu_after - pg_cpu_before, 2)
            lines, first, dups = _marks(marks)
            counts = app.counts()
            result["drain_timed_out"] = counts[JobStatus.COMPLETED] < args.jobs
            result["startup_s"] = round((first or finished) - spawn, 3)
            result["drain_s"] = round(finished - (first or spawn), 3)
            result["drain_jobs_s"] = round(args.jobs / max(finished - (first or spawn), 1e-9), 1)
            result["jobs_started"] = lines
            result["duplicate_starts"] = dups
            result["not_completed"] = args.jobs - counts[JobStatus.COMPLETED]
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            result["worker_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)  # whole worker lives, start-up included
            result["worker_run_cpu_s"] = round(_run_cpu(marks), 3)  # from each pool's start to its exit
        if args.single_jobs:
            started = time.perf_counter()
            for i in range(args.single_jobs):
                app.enqueue("bench.noop", {"i": i})
            result["enqueue_single_jobs_s"] = round(args.single_jobs / (time.perf_counter() - started), 1)
    if schema:
        app.repository.drop_schema()
    app.close()
    if args.redis_url:
        delete_redis_keys(args.redis_url, prefix)
    return result


def bulk_only(args: argparse.Namespace) -> dict[str, Any]:
    """Step 1 alone, ``args.rounds`` times on a fresh schema each: jobs/s of every round and the median."""
    rates: list[float] = []
    for _ in range(args.rounds):
        postgres = not args.database_url.startswith("sqlite")
        schema = f"tether_bench_{uuid.uuid4().hex[:8]}" if postgres else None
        prefix = f"tether-bench-{uuid.uuid4().hex[:8]}"
        app = _connect(args.database_url, schema, args.redis_url, prefix)
        try:
            requests = [EnqueueRequest("bench.noop", {"i": i}) for i in range(args.jobs)]
            started = time.perf_counter()
            for k in range(0, args.jobs, args.chunk):
                app.enqueue_many(requests[k : k + args.chunk])
            rates.append(round(args.jobs / (time.perf_counter() - started), 1))
        finally:
            if schema:
                app.repository.drop_schema()
            app.close()
            if args.redis_url:
                delete_redis_keys(args.redis_url, prefix)
    return {"peer": "tether", "workload": "bulk", "dispatcher": "redis" if args.redis_url else "polling", "jobs": args.jobs, "chunk": args.chunk, "rounds": rates,
            "enqueue_bulk_jobs_s": statistics.median(rates), "load1": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="PostgreSQL URL (default: the test server) or sqlite:////file")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=10, help="threads per worker process (default 10)")
    parser.add_argument("--prefetch", type=int, default=None,
                        help="jobs leased ahead of the free threads per process (default: the pool's, = concurrency)")
    parser.add_argument("--chunk", type=int, default=1000, help="enqueue_many chunk (default 1000)")
    parser.add_argument("--max-running", type=int, default=None,
                        help="limit the queue to this many running jobs across the workers (default: no limit)")
    parser.add_argument("--keys", type=int, default=0, help="give the jobs this many concurrency keys, in turn (default: none)")
    parser.add_argument("--max-running-per-key", type=int, default=None,
                        help="limit the queue to this many running jobs per concurrency key (default: no limit)")
    parser.add_argument("--single-jobs", type=int, default=2000, help="jobs for the single-enqueue step (0: skip)")
    parser.add_argument("--timeout", type=float, default=170.0, help="give up the drain after this many seconds")
    parser.add_argument("--bulk-only", action="store_true", help="run step 1 (bulk enqueue) alone, --rounds times")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --bulk-only (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    parser.add_argument("--verbose", action="store_true", help="workers print their stats and completion batch sizes")
    parser.add_argument("--redis-url", help="dispatch through Redis Streams at this URL (producer and workers); default: polling")
    parser.add_argument("--observe", nargs="?", const="both", choices=("both", "metrics", "tracing", "span"),
                        help="metrics and tracing on (producer and workers), or only one of them; span: no "
                             "Tether tracing, one SDK span per job opened by the handler (the floor)")
    parser.add_argument("--handler-cpu", type=float, default=0.0,
                        help="seconds of CPU each sync handler computes after its mark (default 0: a no-op)")
    parser.add_argument("--sample", type=float, default=1.0, help="with --observe: share of traces recorded (default 1)")
    parser.add_argument("--async-handlers", action="store_true", help="async def handlers (on the pools' event loops)")
    parser.add_argument("--async-concurrency", type=int, default=100, help="async handlers at once per process (default 100)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds each async handler awaits asyncio.sleep (default 0)")
    parser.add_argument("--redis-prefix", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--marks", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args)
        return
    if args.bulk_only:
        result = bulk_only(args)
        print(json.dumps(result) if args.json else
              f"tether bulk enqueue: {args.jobs:,} jobs in chunks of {args.chunk:,}: median "
              f"{result['enqueue_bulk_jobs_s']:,.0f} jobs/s (rounds {result['rounds']}), load {result['load1']:.1f}")
        return
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    print(f"tether w1 on {result['backend']}: {args.jobs:,} no-op jobs, {args.workers} processes x {args.concurrency} "
          f"threads; Python {result['python']}, {os.cpu_count()} CPU(s), load {result['load1']:.1f}")
    for key in ("enqueue_bulk_jobs_s", "enqueue_single_jobs_s", "drain_jobs_s", "drain_s", "startup_s",
                "worker_cpu_s", "pg_cpu_s", "duplicate_starts", "not_completed"):
        if key in result:
            print(f"  {key:<22} {result[key]:>12,}")


if __name__ == "__main__":
    main()
