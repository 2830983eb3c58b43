"""The drain of a limited queue against the same drain unlimited, in the same run: a running limit, and a per-key limit.

    .venv/bin/python bench/limited_drain.py                         # max_running 50, 20,000 jobs, 2 x 16 threads
    .venv/bin/python bench/limited_drain.py --max-running 10 --rounds 3
    .venv/bin/python bench/limited_drain.py --keys 100 --per-key 1  # also: 100 concurrency keys, 1 running each
    .venv/bin/python bench/limited_drain.py --keys 100 --per-key 1 --cases per-key,unlimited

Each round runs ``bench/pg_drain.py --json`` once per case on PostgreSQL (polling dispatcher):
``limited`` with ``--max-running N`` (every lease of the queue takes the limited path: lock the
queue's row, count its running jobs, lease at most the remainder), ``per-key`` with ``--keys K
--max-running-per-key P`` (the same path, counting each key's running jobs too; jobs get the K
keys in turn) and ``unlimited`` (no key, no limit); the order of the cases turns each round.  It
prints each run's drain rate and where the time went (PostgreSQL's CPU seconds, the workers' CPU
seconds), then the median ratio of each limited case to the unlimited drain.  A figure, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def drain(args: argparse.Namespace, case: str) -> dict[str, object]:
    """One ``pg_drain.py --json`` run of ``case``; its result."""
    command = [sys.executable, os.path.join(HERE, "pg_drain.py"), "--json", "--jobs", str(args.jobs),
               "--workers", str(args.workers), "--concurrency", str(args.concurrency), "--single-jobs", "0"]
    if case == "limited":
        command += ["--max-running", str(args.max_running)]
    elif case == "per-key":
        command += ["--keys", str(args.keys), "--max-running-per-key", str(args.per_key)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=args.limit).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-running", type=int, default=50)
    parser.add_argument("--keys", type=int, default=100, help="concurrency keys of the per-key case (default 100)")
    parser.add_argument("--per-key", type=int, default=1, help="max_running_per_key of the per-key case (default 1)")
    parser.add_argument("--cases", default=None,
                        help="comma-separated cases among limited, per-key, unlimited (default: limited,unlimited; "
                             "with --keys or --per-key given, all three)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--limit", type=float, default=300.0, help="give up one run after this many seconds")
    args = parser.parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    default = "limited,per-key,unlimited" if any(a.startswith(("--keys", "--per-key")) for a in given) else "limited,unlimited"
    cases = (args.cases or default).split(",")
    if "unlimited" not in cases or not set(cases) <= {"limited", "per-key", "unlimited"}:
        parser.error("--cases: a comma-separated list of limited, per-key, unlimited that holds unlimited")
    ratios: dict[str, list[float]] = {case: [] for case in cases if case != "unlimited"}
    for round_no in range(args.rounds):
        got: dict[str, dict[str, object]] = {}
        turn = round_no % len(cases)
        for case in cases[turn:] + cases[:turn]:
            got[case] = result = drain(args, case)
            print(f"round {round_no + 1} {case:9}: {float(result['drain_jobs_s']):8,.0f} jobs/s  "  # type: ignore[arg-type]
                  f"postgres cpu {result.get('pg_cpu_s')} s, worker cpu {result.get('worker_cpu_s')} s, "
                  f"not completed {result.get('not_completed')}, duplicate starts {result.get('duplicate_starts')}",
                  flush=True)
        for case, values in ratios.items():
            values.append(float(got[case]["drain_jobs_s"]) / float(got["unlimited"]["drain_jobs_s"]))  # type: ignore[arg-type]
    for case, values in ratios.items():
        what = f"max_running {args.max_running}" if case == "limited" else f"{args.keys} keys, max_running_per_key {args.per_key}"
        print(f"{case} ({what}) / unlimited drain: median {statistics.median(values):.2f} over {len(values)} round(s)")


if __name__ == "__main__":
    main()
