"""The drain of a queue limited to N running jobs against the same drain unlimited, in the same run.

    .venv/bin/python bench/limited_drain.py                         # max_running 50, 20,000 jobs, 2 x 16 threads
    .venv/bin/python bench/limited_drain.py --max-running 10 --rounds 3

Each round runs ``bench/pg_drain.py --json`` twice on PostgreSQL (polling dispatcher), once with
``--max-running N`` (every lease of the queue takes the limited path: lock the queue's row,
count its running jobs, lease at most the remainder) and once without; the order alternates.  It
prints each run's drain rate and where the time went (PostgreSQL's CPU seconds, the workers'
CPU seconds), then the median ratio limited / unlimited.  A figure, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def drain(args: argparse.Namespace, max_running: int | None) -> dict[str, object]:
    """One ``pg_drain.py --json`` run; its result."""
    command = [sys.executable, os.path.join(HERE, "pg_drain.py"), "--json", "--jobs", str(args.jobs),
               "--workers", str(args.workers), "--concurrency", str(args.concurrency), "--single-jobs", "0"]
    if max_running is not None:
        command += ["--max-running", str(max_running)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=args.limit).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-running", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--limit", type=float, default=300.0, help="give up one run after this many seconds")
    args = parser.parse_args(argv)
    ratios: list[float] = []
    for round_no in range(args.rounds):
        got: dict[str, dict[str, object]] = {}
        for side in (["limited", "unlimited"] if round_no % 2 == 0 else ["unlimited", "limited"]):
            got[side] = result = drain(args, args.max_running if side == "limited" else None)
            print(f"round {round_no + 1} {side:9}: {float(result['drain_jobs_s']):8,.0f} jobs/s  "  # type: ignore[arg-type]
                  f"postgres cpu {result.get('pg_cpu_s')} s, worker cpu {result.get('worker_cpu_s')} s, "
                  f"not completed {result.get('not_completed')}, duplicate starts {result.get('duplicate_starts')}",
                  flush=True)
        ratios.append(float(got["limited"]["drain_jobs_s"]) / float(got["unlimited"]["drain_jobs_s"]))  # type: ignore[arg-type]
    print(f"limited (max_running {args.max_running}) / unlimited drain: median {statistics.median(ratios):.2f} "
          f"over {len(ratios)} round(s)")


if __name__ == "__main__":
    main()
