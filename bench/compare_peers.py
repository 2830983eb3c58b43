"""Tether next to the peer job queues and the raw PostgreSQL floors, measured in the same session.

    .venv/bin/python bench/compare_peers.py                     # one round, 20,000 jobs, ~5 minutes
    .venv/bin/python bench/compare_peers.py --rounds 3          # medians of 3 interleaved rounds
    .venv/bin/python bench/compare_peers.py --only tether-pg pgqueuer-asyncpg --jobs 10000
    .venv/bin/python bench/compare_peers.py --out results.jsonl # also keep every raw JSON line

The peers and floors are the scripts of the peer benchmark (``--peerbench``, default
``/work/shared/peerbench``; its README explains the workloads), run as subprocesses with their
own virtualenv's python (``--peer-python``, default ``~/.cache/peerbench/venv/bin/python``); no
peer code is imported here and no peer is a dependency of Tether.  Tether's figures come from
``bench/pg_drain.py`` (PostgreSQL: w1 with worker processes, bulk and single enqueue) and
``bench/drain.py`` (memory and SQLite, one process).  Configurations run one after another and
their order rotates every round; the machine is shared and noisy, so only ratios measured in the
same run mean anything.  The table gives medians and the drain ratio to pgqueuer (asyncpg).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
PEERBENCH = os.environ.get("PEERBENCH_DIR", "/work/shared/peerbench")
PEER_PYTHON = os.path.expanduser(os.environ.get("PEERBENCH_PY", "~/.cache/peerbench/venv/bin/python"))


def configs(args: argparse.Namespace) -> dict[str, tuple[str, list[list[str]]]]:
    """label -> (kind, commands).  Each command prints one JSON line; a config may need several
    (a peer's w1 and its single-enqueue workload are separate runs)."""
    me = sys.executable
    w1 = ["--workload", "w1", "--jobs", str(args.jobs), "--workers", str(args.workers), "--concurrency", "10"]
    single = ["--workload", "single", "--single-jobs", str(args.single_jobs)]

    def peer(script: str, *extra: str, with_single: bool = True) -> tuple[str, list[list[str]]]:
        path = os.path.join(args.peerbench, script)
        commands = [[args.peer_python, path, *w1, *extra]]
        if with_single:
            commands.append([args.peer_python, path, *single, *extra])
        return "peer", commands

    tether_pg = {
        f"tether-pg c={c}": ("tether", [[me, os.path.join(HERE, "pg_drain.py"), "--json", "--jobs", str(args.jobs),
                                          "--workers", str(args.workers), "--concurrency", str(c),
                                          "--single-jobs", str(args.single_jobs)]])
        for c in args.pg_concurrency
    }
    tether_pg_redis = {
        f"tether-pg-redis c={c}": ("tether", [[me, os.path.join(HERE, "pg_drain.py"), "--json", "--jobs", str(args.jobs),
                                                "--workers", str(args.workers), "--concurrency", str(c),
                                                "--single-jobs", str(args.single_jobs), "--redis-url", args.redis_url]])
        for c in args.pg_concurrency
    }
    return {
        **tether_pg,
        **tether_pg_redis,
        "tether-memory": ("tether", [[me, os.path.join(HERE, "drain.py"), "--json", "--backend", "memory",
                                      "--jobs", str(args.jobs), "--concurrency", str(args.concurrency),
                                      "--single-jobs", str(args.single_jobs)]]),
        "tether-sqlite": ("tether", [[me, os.path.join(HERE, "drain.py"), "--json", "--backend", "sqlite",
                                      "--jobs", str(args.jobs), "--concurrency", str(args.concurrency),
                                      "--single-jobs", str(args.single_jobs)]]),
        "pgqueuer-asyncpg": peer("bench_pgqueuer.py", "--driver", "asyncpg"),
        "pgqueuer-psycopg": peer("bench_pgqueuer.py", "--driver", "psycopg"),
        "procrastinate": peer("bench_procrastinate.py"),
        "floor k=1 commit each": peer("floor_pg.py", "--batch", "1", "--complete", "per-job"),
        "floor k=10 batch complete": peer("floor_pg.py", "--batch", "10", "--complete", "batch", with_single=False),
        "floor k=100 batch complete": peer("floor_pg.py", "--batch", "100", "--complete", "batch", with_single=False),
    }


def run_command(command: list[str], limit: float) -> dict[str, Any] | None:
    """Run one benchmark process in its own session; its last JSON line, or None."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                               cwd=os.path.dirname(command[1]))
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the group of the child started above, nothing else
        out, err = process.communicate()
    for line in reversed(out.decode(errors="replace").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)  # type: ignore[no-any-return]
            except json.JSONDecodeError:
                continue
    sys.stderr.write(f"  no result from {' '.join(command[1:3])}: {err.decode(errors='replace')[-800:]}\n")
    return None


def figures(kind: str, results: list[dict[str, Any]]) -> dict[str, float]:
    """bulk/single/drain jobs per second from one config's JSON lines."""
    out: dict[str, float] = {}
    for r in results:
        if kind == "tether" and "drain_per_s" in r:  # bench/drain.py
            out["bulk"] = r["enqueue_per_s"]
            out["drain"] = r["drain_per_s"]
            if "single_per_s" in r:
                out["single"] = r["single_per_s"]
            continue
        if r.get("enqueue_bulk_jobs_s") is not None:
            out["bulk"] = r["enqueue_bulk_jobs_s"]
        if r.get("drain_jobs_s") is not None and not r.get("drain_timed_out"):
            out["drain"] = r["drain_jobs_s"]
        if r.get("enqueue_single_jobs_s") is not None:
            out["single"] = r["enqueue_single_jobs_s"]
        for key in ("worker_cpu_s", "pg_cpu_s"):
            if r.get(key) is not None:
                out[key] = r[key]
        cpu = r.get("cpu") or {}
        for key in ("worker_cpu_s", "pg_cpu_s"):
            if cpu.get(key) is not None:
                out[key] = cpu[key]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=20_000, help="w1 jobs (default 20000)")
    parser.add_argument("--single-jobs", type=int, default=2_000, help="single-enqueue jobs (default 2000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes in w1 (default 2)")
    parser.add_argument("--concurrency", type=int, default=32, help="Tether threads for memory/SQLite (default 32)")
    parser.add_argument("--pg-concurrency", type=int, nargs="+", default=[32],
                        help="Tether threads per PostgreSQL worker process; one row each (default 32)")
    parser.add_argument("--only", nargs="*", help="labels to run (default: all); 'tether-pg' selects every tether-pg "
                        "row (polling), 'tether-pg-redis' every row dispatched by Redis Streams")
    parser.add_argument("--redis-url", default=os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
                        help="Redis for the tether-pg-redis rows")
    parser.add_argument("--peerbench", default=PEERBENCH)
    parser.add_argument("--peer-python", default=PEER_PYTHON)
    parser.add_argument("--limit", type=float, default=240.0, help="kill one run after this many seconds")
    parser.add_argument("--out", help="append every raw JSON line here")
    args = parser.parse_args(argv)
    table = configs(args)
    def family(label: str) -> str:
        return label.split(" c=")[0]

    labels = [label for label in table if not args.only or label in args.only or family(label) in args.only]
    collected: dict[str, list[dict[str, float]]] = {label: [] for label in labels}
    for round_no in range(args.rounds):
        order = labels[round_no % len(labels):] + labels[: round_no % len(labels)]
        for label in order:
            kind, commands = table[label]
            results = []
            for command in commands:
                started = time.time()
                result = run_command(command, args.limit)
                sys.stderr.write(f"{time.strftime('%H:%M:%S')} round {round_no + 1} {label:<28} "
                                 f"{time.time() - started:6.1f}s {'ok' if result else 'FAILED'}\n")
                if result is not None:
                    results.append(result)
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps({"label": label, "round": round_no + 1, "result": result}) + "\n")
            collected[label].append(figures(kind, results))

    def median(label: str, key: str) -> float | None:
        values = [f[key] for f in collected.get(label, []) if key in f]
        return statistics.median(values) if values else None

    reference = median("pgqueuer-asyncpg", "drain")
    print(f"\nSame-run comparison: {args.jobs:,} no-op jobs, w1 with {args.workers} worker processes "
          f"(Tether c threads each, async peers 10 in flight each), {args.rounds} round(s), "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n")
    print("| config | bulk enqueue /s | single enqueue /s | drain /s | drain vs pgqueuer asyncpg | worker CPU s | PG CPU s |")
    print("|---|---|---|---|---|---|---|")

    def cell(value: float | None, digits: int = 0) -> str:
        return "—" if value is None else f"{value:,.{digits}f}"

    for label in labels:
        drain = median(label, "drain")
        ratio = f"{drain / reference:.2f}x" if drain and reference and not label.startswith("tether-memory") else "—"
        print(f"| {label} | {cell(median(label, 'bulk'))} | {cell(median(label, 'single'))} | {cell(drain)} | {ratio} "
              f"| {cell(median(label, 'worker_cpu_s'), 1)} | {cell(median(label, 'pg_cpu_s'), 1)} |")
    print(f"\ntether-memory and tether-sqlite: one process, {args.concurrency} threads (bench/drain.py); "
          "tether-pg c=N: bench/pg_drain.py, N threads per worker process.")


if __name__ == "__main__":
    main()
