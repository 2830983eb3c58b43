"""The async API on PostgreSQL: event-loop lag under concurrent ``aenqueue``, and single async enqueues per second.

    .venv/bin/python bench/async_enqueue.py                       # lag (async, then sync) and single
    .venv/bin/python bench/async_enqueue.py --workload lag --coroutines 200 --per-coroutine 50
    .venv/bin/python bench/async_enqueue.py --workload lag --rounds 5 --no-sync
    .venv/bin/python bench/async_enqueue.py --workload single --single-jobs 2000 --peer
    .venv/bin/python bench/async_enqueue.py --json

Workloads:

- **lag**: ``--coroutines`` coroutines on one loop each enqueue ``--per-coroutine`` jobs one call at
  a time, while a probe coroutine sleeps 1 ms in a loop and records how late each wake-up is (the
  loop's lag).  A warm-up round (one job per coroutine) runs first and is not counted.  Then the
  same with the sync ``app.enqueue`` called from the coroutines, for comparison: each call then
  holds the loop for a round trip.  Reports the p50/p99/max lag in ms and the jobs per second,
  after ``--idle-seconds`` of the probe alone on an idle loop (the machine's own lag, which no
  code can go below).  With ``--rounds N``, each figure is the median of N rounds (each on a new
  ``asyncio.run`` loop), and ``p99_rounds`` lists every round's p99.
- **single**: ``--single-jobs`` jobs, one ``await app.aenqueue`` each, one after the other (the
  peers' "single" workload, /work/shared/peerbench/README.md).  With ``--peer``, pgqueuer's
  ``single`` (peerbench, its own virtualenv under ``PEERBENCH_HOME``) runs in the same run, first
  with psycopg and then asyncpg.

A figure, not a test: nothing is asserted.  Each run uses a schema of its own, dropped at the end.
To compare two checkouts in the same run, run this script with each checkout's own virtualenv
(``../other/.venv/bin/python bench/async_enqueue.py ...`` imports that checkout's Tether),
alternating, as docs/benchmarks.md shows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import tether

DEFAULT_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PEERBENCH = os.environ.get("PEERBENCH_DIR", "/work/shared/peerbench")
PEERBENCH_HOME = os.environ.get("PEERBENCH_HOME", os.path.expanduser("~/.cache/peerbench"))
PROBE_SECONDS = 0.001


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


async def lag_round(app: Any, coroutines: int, per_coroutine: int, use_async: bool) -> dict[str, Any]:
    """One round: the probe's lags (ms) while the coroutines enqueue."""
    lags: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while not done.is_set():
            planned = loop.time() + PROBE_SECONDS
            await asyncio.sleep(PROBE_SECONDS)
            lags.append(max(loop.time() - planned, 0.0) * 1000)

    async def producer(n: int) -> None:
        for i in range(per_coroutine):
            if use_async:
                await app.aenqueue("bench.noop", {"c": n, "i": i})
            else:
                app.enqueue("bench.noop", {"c": n, "i": i})
                await asyncio.sleep(0)

    probing = asyncio.ensure_future(probe())
    started = time.perf_counter()
    await asyncio.gather(*(producer(n) for n in range(coroutines)))
    elapsed = time.perf_counter() - started
    done.set()
    await probing
    return {
        "api": "aenqueue" if use_async else "enqueue (sync, on the loop)",
        "jobs": coroutines * per_coroutine,
        "jobs_s": round(coroutines * per_coroutine / elapsed, 1),
        "lag_p50_ms": round(percentile(lags, 0.50), 2),
        "lag_p99_ms": round(percentile(lags, 0.99), 2),
        "lag_max_ms": round(max(lags, default=0.0), 2),
        "probes": len(lags),
    }


async def idle_round(seconds: float) -> dict[str, Any]:
    """The probe alone on an idle loop: the machine's own lag (the scheduler's floor)."""
    lags: list[float] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        planned = loop.time() + PROBE_SECONDS
        await asyncio.sleep(PROBE_SECONDS)
        lags.append(max(loop.time() - planned, 0.0) * 1000)
    return {"api": "none (idle loop)", "lag_p50_ms": round(percentile(lags, 0.50), 2),
            "lag_p99_ms": round(percentile(lags, 0.99), 2), "lag_max_ms": round(max(lags, default=0.0), 2),
            "probes": len(lags)}


async def lag(app: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = [await idle_round(args.idle_seconds)] if args.idle_seconds > 0 else []
    for use_async in (True, False):
        if not use_async and args.no_sync:
            continue
        await lag_round(app, args.coroutines, 1, use_async)  # warm-up: connections, statements, clock
        results.append(await lag_round(app, args.coroutines, args.per_coroutine, use_async))
    return results


def medians(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One line per api: the median of each figure over the rounds, and the rounds' p99s."""
    merged = []
    for i, first in enumerate(rounds[0]):
        line = dict(first)
        for key, value in first.items():
            if key.startswith(("lag_", "jobs_s")) and isinstance(value, float | int):
                line[key] = round(statistics.median(r[i][key] for r in rounds), 2)
        line["rounds"] = len(rounds)
        line["p99_rounds"] = [r[i]["lag_p99_ms"] for r in rounds]
        merged.append(line)
    return merged


async def single(app: Any, args: argparse.Namespace) -> dict[str, Any]:
    for i in range(20):  # warm-up
        await app.aenqueue("bench.noop", {"i": -i})
    started = time.perf_counter()
    for i in range(args.single_jobs):
        await app.aenqueue("bench.noop", {"i": i})
    elapsed = time.perf_counter() - started
    return {"api": "aenqueue", "workload": "single", "jobs": args.single_jobs,
            "enqueue_single_jobs_s": round(args.single_jobs / elapsed, 1)}


def pgqueuer_single(jobs: int, driver: str) -> dict[str, Any]:
    python = os.path.join(PEERBENCH_HOME, "venv", "bin", "python")
    script = os.path.join(PEERBENCH, "bench_pgqueuer.py")
    if not (os.path.exists(python) and os.path.exists(script)):
        return {"peer": "pgqueuer", "skipped": f"no peerbench venv at {python} (run {PEERBENCH}/setup.sh)"}
    out = subprocess.run([python, script, "--workload", "single", "--single-jobs", str(jobs), "--driver", driver],
                         check=False, cwd=PEERBENCH, capture_output=True, text=True, timeout=600)
    try:
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"peer": "pgqueuer", "driver": driver, "error": out.stderr.strip()[-500:]}
    return {"peer": "pgqueuer", "driver": driver, "enqueue_single_jobs_s": found.get("enqueue_single_jobs_s")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--workload", choices=["lag", "single", "all"], default="all")
    parser.add_argument("--coroutines", type=int, default=200)
    parser.add_argument("--per-coroutine", type=int, default=50)
    parser.add_argument("--single-jobs", type=int, default=2000)
    parser.add_argument("--pool-size", type=int, default=10, help="the app's pool size (async: that many calls in flight)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each workload (single interleaved with the peer); medians")
    parser.add_argument("--idle-seconds", type=float, default=3.0, help="lag: seconds of the probe on an idle loop first (0: none)")
    parser.add_argument("--no-sync", action="store_true", help="lag: skip the sync enqueue's round")
    parser.add_argument("--peer", action="store_true", help="also run pgqueuer's single (peerbench) in the same run")
    parser.add_argument("--json", action="store_true", help="one JSON line per result")
    args = parser.parse_args(argv)
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}"
    app = tether.connect(args.database_url, schema=schema, pool_size=args.pool_size)
    results: list[dict[str, Any]] = []
    try:
        if args.workload in ("lag", "all"):
            results += medians([asyncio.run(lag(app, args)) for _ in range(args.rounds)])
        if args.workload in ("single", "all"):
            ours: list[float] = []
            peers: dict[str, list[float]] = {"psycopg": [], "asyncpg": []}
            for _ in range(args.rounds):
                ours.append(asyncio.run(single(app, args))["enqueue_single_jobs_s"])
                if args.peer:
                    for driver, rates in peers.items():
                        found = pgqueuer_single(args.single_jobs, driver)
                        if found.get("enqueue_single_jobs_s") is not None:
                            rates.append(found["enqueue_single_jobs_s"])
                        else:
                            results.append(found)
            results.append({"peer": "tether", "api": "aenqueue", "workload": "single", "rounds": ours,
                            "enqueue_single_jobs_s": statistics.median(ours)})
            for driver, rates in peers.items():
                if rates:
                    results.append({"peer": "pgqueuer", "driver": driver, "workload": "single", "rounds": rates,
                                    "enqueue_single_jobs_s": statistics.median(rates)})
    finally:
        app.repository.drop_schema()
        app.close()
    load = os.getloadavg()[0]
    for result in results:
        result["load1"] = round(load, 1)
        print(json.dumps(result) if args.json else "  ".join(f"{k}={v}" for k, v in result.items()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
