"""The PostgreSQL drain with metrics and tracing off against on, in the same run.

    .venv/bin/python bench/observability_cost.py                    # 3 rounds, 20,000 jobs
    .venv/bin/python bench/observability_cost.py --rounds 5 --jobs 20000 --concurrency 16
    .venv/bin/python bench/observability_cost.py --modes metrics tracing both   # each against off
    .venv/bin/python bench/observability_cost.py --modes tracing --sample 0.1   # 1 trace in 10 recorded
    .venv/bin/python bench/observability_cost.py --modes metrics tracing tracing:0.1   # each its own sample
    .venv/bin/python bench/observability_cost.py --modes tracing:0.1 --chunk 1   # jobs enqueued one by one
    .venv/bin/python bench/observability_cost.py --modes tracing span   # Tether's tracing against the SDK's floor
    .venv/bin/python bench/observability_cost.py --modes tracing --handler-cpu 0.0005   # jobs of 0.5 ms of CPU

Each round runs ``bench/pg_drain.py --json`` once plain and once per mode with ``--observe MODE``
(``metrics``: Prometheus metrics in every worker; ``tracing``: OpenTelemetry spans at enqueue and
around every handler, made by the SDK and dropped by its exporter; ``both``; ``span``: no Tether
tracing, the handler itself opening one span of the same SDK per job, the floor any per-job span
pays); the order rotates every round.  ``MODE:R`` records a share ``R`` of the traces (a ratio sampler) in that mode alone.
The machine is shared and noisy: quote the median of the per-round ratios (mode / off), and the
workers' CPU per job from their pools' start to their exit (imports and set-up excluded; steadier
than the rate, which the other load on the machine moves).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def drain_rate(mode: str, args: argparse.Namespace) -> tuple[float, float]:
    """Jobs per second of one ``pg_drain.py`` drain, plain (``off``) or with ``--observe mode``,
    and the workers' CPU microseconds per job (their whole lives, start-up included: steadier than
    the rate on a busy machine)."""
    command = [sys.executable, os.path.join(HERE, "pg_drain.py"), "--json", "--jobs", str(args.jobs),
               "--workers", str(args.workers), "--concurrency", str(args.concurrency), "--single-jobs", "0",
               "--chunk", str(args.chunk), "--handler-cpu", str(args.handler_cpu)]
    if mode != "off":
        what, _, sample = mode.partition(":")
        command += ["--observe", what, "--sample", sample or str(args.sample)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=args.limit).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return float(result["drain_jobs_s"]), float(result["worker_run_cpu_s"]) * 1e6 / args.jobs


def mode_name(text: str) -> str:
    """``both``, ``metrics``, ``tracing``, ``span``, each optionally ``:R`` (a sample ratio in (0, 1])."""
    what, _, sample = text.partition(":")
    if what not in ("both", "metrics", "tracing", "span") or (sample and not 0 < float(sample) <= 1):
        raise argparse.ArgumentTypeError(f"{text!r}: give both, metrics, tracing or span, optionally :R with 0 < R <= 1")
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=16, help="threads per worker process (default 16)")
    parser.add_argument("--modes", nargs="+", default=["both"], type=mode_name,
                        help="both, metrics, tracing, span, each optionally :R (its own sample ratio)")
    parser.add_argument("--chunk", type=int, default=1_000,
                        help="jobs per enqueue_many (default 1,000; 1: each job its own send span and trace context)")
    parser.add_argument("--handler-cpu", type=float, default=0.0,
                        help="seconds of CPU each handler computes (default 0: no-op jobs)")
    parser.add_argument("--sample", type=float, default=1.0, help="share of traces recorded (default 1: every job)")
    parser.add_argument("--limit", type=float, default=240.0, help="give up one run after this many seconds")
    args = parser.parse_args(argv)
    modes = ["off", *args.modes]
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    ratios: dict[str, list[float]] = {mode: [] for mode in args.modes}
    for round_no in range(args.rounds):
        shift = round_no % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            rate, cpu_us = drain_rate(mode, args)
            rates[mode].append(rate)
            cpu[mode].append(cpu_us)
            print(f"round {round_no + 1} {mode:<12}: {rate:,.0f} jobs/s, workers' CPU {cpu_us:,.0f} us/job "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
        for mode in args.modes:
            ratios[mode].append(rates[mode][-1] / rates["off"][-1])
    print(f"off: median {statistics.median(rates['off']):,.0f} jobs/s, {statistics.median(cpu['off']):,.0f} us/job")
    for mode in args.modes:
        print(f"{mode}: median {statistics.median(rates[mode]):,.0f} jobs/s, {statistics.median(cpu[mode]):,.0f} us/job; "
              f"{mode}/off per round {[round(r, 3) for r in ratios[mode]]}, median {statistics.median(ratios[mode]):.3f}")

if __name__ == "__main__":
    main()
