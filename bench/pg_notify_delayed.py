"""How close to ``scheduled_at`` delayed jobs start with PostgreSQL LISTEN/NOTIFY wake-ups.

    .venv/bin/python bench/pg_notify_delayed.py            # 20 jobs, due 0.5 s to 3.1 s ahead

One worker process (``listen=True``, ``poll_interval`` 5 s, so the poll cannot explain a start
near the due time) idles; the driver enqueues ``--jobs`` jobs, each due ``0.5 + 0.137 * i`` s
later, and reads the handler start times (``time.time()``) back.  Prints the offsets start minus
``scheduled_at`` in milliseconds.  A figure, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta

import tether

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORKER = """
import os, sys, time, tether
url, schema, marks = sys.argv[1:4]
app = tether.connect(url, schema=schema, listen=True, poll_interval=5.0)
fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

@app.handler("bench.delayed")
def mark(payload):
    os.write(fd, f"{payload['i']} {time.time():.6f}\\n".encode())

app.worker(concurrency=1, max_wait=30.0, reap_interval=600).run()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    url = os.environ.get("TETHER_TEST_DATABASE_URL", DEFAULT_POSTGRES)
    schema = f"tether_delayed_bench_{uuid.uuid4().hex[:8]}"
    producer = tether.connect(url, schema=schema, listen=True)
    with tempfile.TemporaryDirectory(prefix="tether-delayed-") as folder:
        marks = os.path.join(folder, "marks")
        proc = subprocess.Popen([sys.executable, "-c", WORKER, url, schema, marks], start_new_session=True)
        try:
            time.sleep(3.0)  # the worker is up, listening and idle
            due: dict[int, float] = {}
            for i in range(args.jobs):
                at = producer.clock.now() + timedelta(seconds=0.5 + 0.137 * i)
                due[i] = at.timestamp()
                producer.enqueue("bench.delayed", {"i": i}, run_at=at)
            time.sleep(0.5 + 0.137 * args.jobs + 2.0)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            producer.repository.drop_schema()  # type: ignore[attr-defined]
            producer.close()
        with open(marks) as f:
            offsets = sorted((float(t) - due[int(i)]) * 1000 for i, t in (line.split() for line in f))
    print(json.dumps({
        "jobs": args.jobs, "started": len(offsets),
        "offset_min_ms": round(offsets[0], 2), "offset_p50_ms": round(statistics.median(offsets), 2),
        "offset_max_ms": round(offsets[-1], 2), "load_average": [round(x, 2) for x in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
