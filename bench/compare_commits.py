"""The PostgreSQL drain of this checkout against another checkout of Tether, in the same run.

    git worktree add --detach ../tether-base 5465541 && make -C ../tether-base install
    .venv/bin/python bench/compare_commits.py --base ../tether-base                 # 5 rounds
    .venv/bin/python bench/compare_commits.py --base ../tether-base --rounds 7 --jobs 20000 --concurrency 16

Each round runs ``bench/pg_drain.py --json`` of both checkouts, each with its own virtualenv's
python (``<checkout>/.venv/bin/python``), one after the other; the order alternates every round so
neither side always runs on a warmer machine.  The machine is shared and noisy, so the figure to
quote is the median of the per-round ratios (this checkout / base), not a single drain rate.
Nothing is asserted: it prints one line per run and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
THIS_CHECKOUT = os.path.dirname(HERE)


def drain_rate(checkout: str, args: argparse.Namespace) -> float:
    """Jobs per second of one ``pg_drain.py`` run of ``checkout`` (its w1 drain, polling dispatcher)."""
    python = os.path.join(checkout, ".venv", "bin", "python")
    command = [python, os.path.join(checkout, "bench", "pg_drain.py"), "--json", "--jobs", str(args.jobs),
               "--workers", str(args.workers), "--concurrency", str(args.concurrency), "--single-jobs", "0"]
    if args.database_url:
        command += ["--database-url", args.database_url]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=args.limit).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return float(result["drain_jobs_s"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the other checkout (with its .venv installed)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=16, help="threads per worker process (default 16)")
    parser.add_argument("--database-url", help="PostgreSQL URL (default: pg_drain.py's, the test server)")
    parser.add_argument("--limit", type=float, default=240.0, help="give up one run after this many seconds")
    args = parser.parse_args(argv)
    base = os.path.abspath(args.base)
    sides = {"this": THIS_CHECKOUT, "base": base}
    rates: dict[str, list[float]] = {"this": [], "base": []}
    ratios: list[float] = []
    for round_no in range(args.rounds):
        order = ["base", "this"] if round_no % 2 == 0 else ["this", "base"]
        got = {}
        for side in order:
            got[side] = drain_rate(sides[side], args)
            rates[side].append(got[side])
            print(f"round {round_no + 1} {side}: {got[side]:,.0f} jobs/s  (load {os.getloadavg()[0]:.1f})", flush=True)
        ratios.append(got["this"] / got["base"])
    print(f"base  {base}: median {statistics.median(rates['base']):,.0f} jobs/s  {[round(r) for r in rates['base']]}")
    print(f"this  {THIS_CHECKOUT}: median {statistics.median(rates['this']):,.0f} jobs/s  {[round(r) for r in rates['this']]}")
    print(f"this/base per round: {[round(r, 3) for r in ratios]}; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    sys.exit(main())
