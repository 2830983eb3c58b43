"""Single-enqueue rate with many producers on PostgreSQL, with and without LISTEN/NOTIFY wake-ups.

    .venv/bin/python bench/pg_notify_enqueue.py                       # 16 producer threads, 3 rounds each way
    .venv/bin/python bench/pg_notify_enqueue.py --producers 16 --jobs 4000 --rounds 3

Each producer thread calls ``app.enqueue`` (one job, no key, autocommit: one statement) in a loop;
the rate is all jobs over the wall time from the first call to the last return.  ``listen=True``
adds ``pg_notify`` to that statement, and PostgreSQL serialises the commits of notifying
transactions on one lock; one idle listener holds ``LISTEN`` on the channel meanwhile, as a worker
would.  The two modes alternate round by round (off, on, off, on, ...) in one schema each, so
machine noise hits both alike; the medians are printed.  A figure, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from typing import Any

import psycopg
import tether

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def one_round(app: Any, producers: int, jobs: int) -> float:
    per_thread = jobs // producers
    start = threading.Barrier(producers + 1)

    def produce() -> None:
        start.wait()
        for i in range(per_thread):
            app.enqueue("bench.noop", {"i": i})

    threads = [threading.Thread(target=produce) for _ in range(producers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return per_thread * producers / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=4000, help="jobs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each mode")
    args = parser.parse_args()
    url = os.environ.get("TETHER_TEST_DATABASE_URL", DEFAULT_POSTGRES)
    apps = {}
    for listen in (False, True):
        schema = f"tether_notify_bench_{uuid.uuid4().hex[:8]}"
        apps[listen] = tether.connect(url, schema=schema, listen=listen, pool_size=args.producers)
    engine = apps[True].repository.engine
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    listener = psycopg.connect(*cargs, **{**cparams, "autocommit": True})
    listener.execute(f'LISTEN "{apps[True].repository.wakeup_channel}"')
    rates: dict[bool, list[float]] = {False: [], True: []}
    try:
        for _ in range(args.rounds):
            for listen in (False, True):
                rates[listen].append(one_round(apps[listen], args.producers, args.jobs))
                listener.execute("SELECT 1")  # let the listener drain what it was sent
    finally:
        listener.close()
        for app in apps.values():
            app.repository.drop_schema()
            app.close()
    result = {
        "producers": args.producers, "jobs_per_round": args.jobs, "rounds": args.rounds,
        "polling_per_s": [round(r) for r in rates[False]], "notify_per_s": [round(r) for r in rates[True]],
        "polling_median_per_s": round(statistics.median(rates[False])),
        "notify_median_per_s": round(statistics.median(rates[True])),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
