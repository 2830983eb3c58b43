"""Latency benchmark: enqueue-to-handler-start, one idle worker, jobs enqueued one at a time.

    .venv/bin/python bench/latency.py                                   # every backend x dispatcher
    .venv/bin/python bench/latency.py --backend sqlite --dispatcher redis --jobs 300 --interval 0.02
    .venv/bin/python bench/latency.py --backend postgres --dispatcher listen   # PostgreSQL LISTEN/NOTIFY, no Redis
    .venv/bin/python bench/latency.py --peers                           # + raw Redis floor and every peer (peerbench)

The workload is peerbench's ``w2`` (../shared/peerbench/README.md), measured the same way: one
worker (``concurrency=1``) is started and warmed up with 3 jobs, left idle for 1 s, then ``--jobs``
jobs are enqueued one ``app.enqueue`` call at a time on a fixed ``--interval`` schedule; a job's
latency is the handler's start minus the moment just before its enqueue call, both ``time.time()``
on one machine.  Prints p50/p95/p99/max in milliseconds per (backend, dispatcher).

The worker runs in a separate process (as in peerbench) for SQLite and PostgreSQL, so the polling
dispatcher gets no in-process wake-up and finds the job at its next poll (``--poll-interval``).
``--dispatcher listen`` (PostgreSQL only) builds both apps with ``listen=True``: the enqueue
notifies, and the idle worker is woken through ``LISTEN``.
The memory repository cannot be shared between processes, so ``memory`` runs producer and worker
in one process: there polling is woken at once by the in-process notify, which flatters it.

``--peers`` also runs, in the same session, the floor of Tether's own design
(``bench/durable_floor.py``: raw drivers, durable INSERT + XADD + XREADGROUP + SKIP LOCKED lease,
with the lease committed durably and asynchronously), peerbench's w2 for its raw redis-py Streams
floor and every peer (saq on Redis and on PostgreSQL, rq, pgqueuer, procrastinate, oban) through the peer virtualenvs
(``~/.cache/peerbench/venv``; ``bash ../shared/peerbench/setup.sh`` creates it).  A figure, not a
test: nothing is asserted.  Redis keys use a prefix of their own and are deleted afterwards;
PostgreSQL uses a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchutil import delete_redis_keys, percentile

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
JOB_TYPE = "bench.latency"
WARMUP_BASE = 10_000_000


# -- the worker side -----------------------------------------------------------------------------
def make_app(
    db_url: str, schema: str | None, redis_url: str | None, prefix: str, poll_interval: float, listen: bool = False
) -> Any:
    import tether

    options: dict[str, Any] = {"poll_interval": poll_interval, "listen": listen}
    if redis_url:
        options["redis_options"] = {"prefix": prefix}
    return tether.connect(db_url, redis_url=redis_url, schema=schema, **options)


def attach_marker(app: Any, marks_path: str) -> None:
    """Register the handler: append ``"<i> <time.time()>"`` to the marks file as it starts."""
    fd = os.open(marks_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @app.handler(JOB_TYPE)
    def mark(payload: dict[str, Any]) -> None:
        os.write(fd, f"{payload['i']} {time.time():.6f}\n".encode())


def worker_main(args: argparse.Namespace) -> None:
    app = make_app(args.db_url, args.schema, args.redis_url, args.prefix, args.poll_interval, args.listen)
    attach_marker(app, args.marks)
    pool = app.worker(concurrency=1, max_wait=1.0, reap_interval=60.0)
    try:
        pool.run(install_signal_handlers=True)
    finally:
        app.close()


# -- the driver side -----------------------------------------------------------------------------
def read_marks(path: str) -> dict[int, float]:
    marks: dict[int, float] = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    i, t = int(parts[0]), float(parts[1])
                    marks[i] = min(t, marks.get(i, t))
    except FileNotFoundError:
        pass
    return marks


def wait_marks(path: str, wanted: set[int], timeout: float) -> dict[int, float]:
    end = time.time() + timeout
    while True:
        marks = read_marks(path)
        if wanted <= marks.keys() or time.time() > end:
            return marks
        time.sleep(0.02)


def backend(name: str, folder: str) -> tuple[str, str | None]:
    """(database URL, schema) of a fresh store; a PostgreSQL schema is dropped by :func:`measure`."""
    if name == "memory":
        return "memory://", None
    if name == "sqlite":
        return f"sqlite:///{os.path.join(folder, f'lat-{uuid.uuid4().hex[:6]}.db')}", None
    if name == "postgres":
        return os.environ.get("TETHER_TEST_DATABASE_URL", DEFAULT_POSTGRES), f"tether_lat_{uuid.uuid4().hex[:8]}"
    raise SystemExit(f"unknown backend {name!r}")  # pragma: no cover - argparse restricts the choices


USED_PREFIXES: list[str] = []


def measure(args: argparse.Namespace, backend_name: str, dispatcher: str, folder: str) -> dict[str, Any]:
    redis_url = args.redis_url if dispatcher == "redis" else None
    listen = dispatcher == "listen"
    prefix = f"tether-lat-{uuid.uuid4().hex[:8]}"
    USED_PREFIXES.append(prefix)
    marks_path = os.path.join(folder, f"marks-{uuid.uuid4().hex[:6]}")
    result: dict[str, Any] = {"backend": backend_name, "dispatcher": dispatcher, "jobs": args.jobs}
    db_url, schema = backend(backend_name, folder)
    app = make_app(db_url, schema, redis_url, prefix, args.poll_interval, listen)
    proc: subprocess.Popen[bytes] | None = None
    pool = None
    try:
        if backend_name == "memory":
            result["worker"] = "same process (thread)"
            attach_marker(app, marks_path)
            pool = app.worker(concurrency=1, max_wait=1.0, reap_interval=60.0)
            threading.Thread(target=pool.run, kwargs={"install_signal_handlers": False}, daemon=True).start()
        else:
            result["worker"] = "separate process"
            cmd = [sys.executable, os.path.abspath(__file__), "--role", "worker", "--db-url", db_url,
                   "--marks", marks_path, "--prefix", prefix, "--poll-interval", str(args.poll_interval)]
            if schema:
                cmd += ["--schema", schema]
            if redis_url:
                cmd += ["--redis-url", redis_url]
            if listen:
                cmd += ["--listen"]
            proc = subprocess.Popen(cmd, start_new_session=True)
        warm = [WARMUP_BASE + i for i in range(3)]
        for i in warm:
            app.enqueue(JOB_TYPE, {"i": i})
        marks = wait_marks(marks_path, set(warm), timeout=60)
        if not set(warm) <= marks.keys():
            raise RuntimeError("warm-up jobs never ran")
        time.sleep(1.0)  # let the worker go idle
        t_call: list[float] = []
        t_ret: list[float] = []
        t0 = time.time() + 0.05
        for i in range(args.jobs):
            delay = t0 + i * args.interval - time.time()
            if delay > 0:
                time.sleep(delay)
            t_call.append(time.time())
            app.enqueue(JOB_TYPE, {"i": i})
            t_ret.append(time.time())
        marks = wait_marks(marks_path, set(range(args.jobs)), timeout=30)
        lat = [(marks[i] - t_call[i]) * 1000 for i in range(args.jobs) if i in marks]
        enq = [(r - c) * 1000 for c, r in zip(t_call, t_ret)]
        result.update(
            missing=args.jobs - len(lat),
            p50_ms=round(percentile(lat, 50), 2),
            p95_ms=round(percentile(lat, 95), 2),
            p99_ms=round(percentile(lat, 99), 2),
            max_ms=round(max(lat), 2),
            enqueue_call_p50_ms=round(percentile(enq, 50), 2),
        )
    finally:
        if pool is not None:
            pool.stop(drain_timeout=5)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
        if schema:
            drop = getattr(app.repository, "drop_schema", None)
            if drop is not None:
                drop()
        app.close()
        if redis_url:
            delete_redis_keys(redis_url, prefix)
    return result


FLOORS = {"floor_pg_redis": "on", "floor_pg_redis_async": "off"}


def run_floors(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The floor of Tether's own design (``bench/durable_floor.py``): raw psycopg + redis-py doing
    a durable INSERT, XADD, XREADGROUP and a SKIP LOCKED lease committed durably (as Tether does)
    and under ``synchronous_commit = off``."""
    import durable_floor

    dsn = durable_floor.dsn_of(os.environ.get("TETHER_TEST_DATABASE_URL", DEFAULT_POSTGRES))
    rows = []
    for label, lease_commit in FLOORS.items():
        if args.peers_only and label not in args.peers_only:
            continue
        row = durable_floor.measure(dsn, args.redis_url, args.jobs, args.interval, lease_commit)
        row["dispatcher"] = label
        row["backend"] = "floor"
        rows.append(row)
    return rows


def run_peers(args: argparse.Namespace) -> list[dict[str, Any]]:
    """peerbench's raw Redis floor and saq on Redis, w2 with the same job count and interval."""
    folder = Path(os.environ.get("PEERBENCH_DIR", Path(__file__).resolve().parents[2] / "shared" / "peerbench"))
    python = Path(os.environ.get("PEERBENCH_HOME", Path.home() / ".cache" / "peerbench")) / "venv" / "bin" / "python"
    if not python.exists() or not folder.exists():
        print(f"peers skipped: need {python} and {folder} (bash setup.sh there)", file=sys.stderr)
        return []
    oban_python = python.parent.parent.parent / "oban-venv" / "bin" / "python"
    runs: list[tuple[str, str, list[str], Path]] = [
        ("floor_redis", "floor_redis.py", [], python),
        ("saq-redis", "bench_saq.py", ["--saq-backend", "redis"], python),
        ("rq-simple", "bench_rq.py", ["--worker-class", "SimpleWorker"], python),
        ("pgqueuer-asyncpg", "bench_pgqueuer.py", ["--driver", "asyncpg"], python),
        ("procrastinate", "bench_procrastinate.py", [], python),
        ("saq-postgres", "bench_saq.py", ["--saq-backend", "postgres"], python),
        ("oban", "bench_oban.py", [], oban_python),
    ]
    if args.peers_only:
        runs = [r for r in runs if r[0] in args.peers_only]
    out = []
    for label, script, extra, interpreter in runs:
        if not interpreter.exists():
            print(f"{label} skipped: no {interpreter}", file=sys.stderr)
            continue
        cmd = [str(interpreter), script, "--workload", "w2", *extra, "--lat-jobs", str(args.jobs),
               "--lat-interval", str(args.interval)]
        proc = subprocess.run(cmd, check=False, cwd=folder, capture_output=True, text=True, timeout=600)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            print(f"{label} printed no result: {proc.stderr[-2000:]}", file=sys.stderr)
            continue
        res = json.loads(lines[-1])
        out.append({
            "backend": "peer", "dispatcher": label, "jobs": res.get("jobs"),
            "worker": "separate process", "missing": res.get("missing"),
            "p50_ms": res.get("lat_p50_ms"), "p95_ms": res.get("lat_p95_ms"), "p99_ms": res.get("lat_p99_ms"),
            "max_ms": res.get("lat_max_ms"), "enqueue_call_p50_ms": res.get("enqueue_call_p50_ms"),
        })
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=["driver", "worker"], default="driver")
    p.add_argument("--backend", nargs="+", choices=["memory", "sqlite", "postgres"], default=["memory", "sqlite", "postgres"])
    p.add_argument("--dispatcher", nargs="+", choices=["polling", "redis", "listen"], default=["polling", "redis", "listen"],
                   help="listen: PostgreSQL LISTEN/NOTIFY without Redis (PostgreSQL only)")
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--interval", type=float, default=0.02, help="seconds between two enqueues")
    p.add_argument("--poll-interval", type=float, default=1.0, help="polling dispatcher's longest idle wait (s)")
    # No default here: the worker role must use Redis exactly when the driver passes --redis-url
    # (the polling runs pass none); a default would make a polling run's worker read Redis Streams
    # that nobody publishes to, so it found jobs only at the dispatcher's sweep, seconds late.
    p.add_argument("--redis-url", help=f"Redis for the redis dispatcher (driver default: "
                   f"$TETHER_TEST_REDIS_URL or {DEFAULT_REDIS}; worker: none unless given)")
    p.add_argument("--peers", action="store_true", help="also run peerbench's w2 for the Redis floor and every peer (same session)")
    p.add_argument("--peers-only", nargs="+", metavar="LABEL",
                   help="with --peers, just these: floor_pg_redis floor_pg_redis_async floor_redis saq-redis rq-simple pgqueuer-asyncpg procrastinate "
                        "saq-postgres oban")
    p.add_argument("--skip-tether", action="store_true", help="with --peers, run only the peers")
    # worker role only
    p.add_argument("--db-url")
    p.add_argument("--schema")
    p.add_argument("--marks")
    p.add_argument("--prefix", default="tether-lat")
    p.add_argument("--listen", action="store_true", help="worker role: connect with listen=True")
    args = p.parse_args()
    if args.role == "worker":
        worker_main(args)
        return
    if args.redis_url is None:
        args.redis_url = os.environ.get("TETHER_TEST_REDIS_URL", DEFAULT_REDIS)

    print(f"# latency: {args.jobs} jobs, {args.interval * 1000:.0f} ms apart, 1 idle worker; "
          f"python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"{'backend':9} {'dispatcher':20} {'worker':22} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} {'missing':>7}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tether-lat-") as folder:
        for backend_name in [] if args.skip_tether else args.backend:
            for dispatcher in args.dispatcher:
                if dispatcher == "listen" and backend_name != "postgres":
                    continue  # LISTEN/NOTIFY is PostgreSQL's
                try:
                    row = measure(args, backend_name, dispatcher, folder)
                except Exception as exc:  # noqa: BLE001 - report and go on with the next combination
                    print(f"{backend_name:9} {dispatcher:20} failed: {type(exc).__name__}: {exc}")
                    continue
                rows.append(row)
                print_row(row)
    time.sleep(1.0)  # then delete again whatever a stopping worker wrote after its run's clean-up
    for prefix in USED_PREFIXES:
        delete_redis_keys(args.redis_url, prefix)
    if args.peers:
        for row in run_floors(args):
            rows.append(row)
            print_row(row)
        for row in run_peers(args):
            rows.append(row)
            print_row(row)
    print(json.dumps(rows), file=sys.stderr)


def print_row(row: dict[str, Any]) -> None:
    print(f"{row['backend']:9} {row['dispatcher']:20} {row['worker']:22} {row['p50_ms']:>8} {row['p95_ms']:>8} "
          f"{row['p99_ms']:>8} {row['max_ms']:>8} {row['missing']:>7}", flush=True)


if __name__ == "__main__":
    main()
