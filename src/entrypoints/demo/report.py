"""The verdict of a ``tether demo`` run: how each job of the tree ended against its plan, and the summary printed and written."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tether.domain.job import Job, JobStatus
from tether.entrypoints.demo.options import QUEUE, DemoOptions
from tether.entrypoints.demo.tasks import FailurePlan, LatencyRecorder, ResultsFile
from tether.entrypoints.settings import redact_url

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether

#: What the run knows of each file it enqueued, by idempotency key: (absolute path, path from
#: the root, its failure plan).
Plans = dict[str, tuple[Path, str, FailurePlan]]


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in (0, 1]) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def unfinished(counts: dict[JobStatus, int]) -> int:
    """How many jobs of ``counts`` are queued, running or retrying."""
    return sum(counts.get(s, 0) for s in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRYING))


def _all_demo_jobs(app: Tether) -> Iterator[Job]:
    offset = 0
    while True:
        page = app.list(queue=QUEUE, limit=1000, offset=offset)
        yield from page
        if len(page) < 1000:
            return
        offset += len(page)


def summarise(
    app: Tether,
    options: DemoOptions,
    plans: Plans,
    results: ResultsFile,
    recorder: LatencyRecorder,
    pending_at_start: int,
    run_seconds: float,
    created: int,
    known: int,
) -> dict[str, Any]:
    """The summary of a run (the content of ``summary.json`` but ``interrupted``): the jobs of the
    tree by status, the problems (a job that did not end as its plan says, or a result missing),
    throughput in jobs/s, latencies in milliseconds, and ``as_designed``."""
    counts = app.counts(queue=QUEUE)
    stored = results.read()
    by_key = {job.idempotency_key: job for job in _all_demo_jobs(app) if job.idempotency_key in plans}
    problems: list[str] = []
    tree_counts = {status.value: 0 for status in JobStatus}
    retried = designed_dead = 0
    dead_letters: list[dict[str, Any]] = []
    for key, (path, rel, plan) in plans.items():
        job = by_key.get(key)
        if job is None:
            problems.append(f"{rel}: no job")
            continue
        tree_counts[job.status.value] += 1
        if job.status is JobStatus.DEAD:
            dead_letters.append({"id": job.id, "rel": rel, "attempts": job.attempts, "last_error": job.last_error})
        if plan.permanent:
            if job.status is JobStatus.DEAD and job.attempts == 1:
                designed_dead += 1
            else:
                problems.append(f"{rel}: planned to end dead after 1 attempt, is {job.status.value} after {job.attempts}")
        elif job.status is not JobStatus.COMPLETED:
            problems.append(f"{rel}: should be completed, is {job.status.value} ({job.last_error or 'no error'})")
        elif str(path) not in stored:
            problems.append(f"{rel}: completed but its result is missing from {options.results_path}")
        if job.status is JobStatus.COMPLETED and job.attempts > 1:
            retried += 1
    left = unfinished(counts)
    tree_unfinished = sum(tree_counts[status.value] for status in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRYING))
    # Each unfinished job of the tree is one problem above (and counted once); the queue may also
    # hold unfinished jobs of other trees (an earlier run with another --path).
    others = max(left - tree_unfinished, 0)
    finished_this_run = max(pending_at_start - left, 0)
    latencies = recorder.latencies
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    return {
        "root": str(options.root),
        "files": len(plans),
        "new_jobs": created,
        "known_jobs": known,
        "counts": tree_counts,
        "queue_counts": {status.value: counts.get(status, 0) for status in JobStatus},
        "retried_then_completed": retried,
        "planned_dead": sum(1 for _, _, plan in plans.values() if plan.permanent),
        "dead_as_designed": designed_dead,
        "finished_this_run": finished_this_run,
        "run_seconds": round(run_seconds, 3),
        "jobs_per_second": round(finished_this_run / run_seconds, 1) if finished_this_run and run_seconds > 0 else None,
        "latency_p50_ms": round(p50 * 1000, 1) if p50 is not None else None,
        "latency_p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
        "latency_jobs": len(latencies),
        "results_file": str(options.results_path),
        "results_stored": len(stored),
        "database_url": redact_url(options.database_url),
        "schema": options.schema,
        "dead_letters": dead_letters[:50],
        "log_file": str(options.log_path),
        "problems": problems[:50],
        "problem_count": len(problems),
        "unfinished": tree_unfinished + others,
        "other_trees_unfinished": others,
        "as_designed": not problems and not others,
    }


def print_summary(console: Console, summary: dict[str, Any], ok: bool) -> None:
    """Print ``summary`` (from :func:`summarise`, with ``interrupted``) on ``console``; ``ok`` is the verdict."""
    table = Table(title="jobs of this tree by status", title_justify="left")
    for status in JobStatus:
        table.add_column(status.value, justify="right")
    table.add_row(*(f"{summary['counts'][status.value]:,}" for status in JobStatus))
    console.print(table)
    console.print(
        f"retried then completed: {summary['retried_then_completed']:,}"
        f"; dead: {summary['dead_as_designed']:,} of {summary['planned_dead']:,} planned permanent failures"
    )
    if summary["finished_this_run"]:
        console.print(
            f"this run: {summary['finished_this_run']:,} job(s) finished in {summary['run_seconds']:.2f} s"
            f" = {summary['jobs_per_second']:,} jobs/s"
        )
    else:
        console.print("this run: no job needed running (every job was already finished)")
    if summary["latency_p50_ms"] is not None:
        console.print(
            f"enqueue-to-start latency of the {summary['latency_jobs']:,} job(s) this run enqueued, at their first start: "
            f"p50 {summary['latency_p50_ms']:,} ms, p99 {summary['latency_p99_ms']:,} ms"
            " (all were enqueued before the workers started, so this is mostly time spent waiting in the backlog)"
        )
    if summary["dead_letters"]:
        dead = Table(
            title="dead letters (run one again with: tether retry ID --database-url "
            + summary["database_url"]
            + (f" --schema {summary['schema']}" if summary["schema"] else "")
            + ")",
            title_justify="left",
        )
        dead.add_column("id", justify="right")
        dead.add_column("file")
        dead.add_column("attempts", justify="right")
        dead.add_column("last error", overflow="fold")
        for letter in summary["dead_letters"][:10]:
            dead.add_row(str(letter["id"]), letter["rel"], str(letter["attempts"]), letter["last_error"] or "")
        console.print(dead)
    console.print(f"results: {escape(summary['results_file'])} ({summary['results_stored']:,} file(s))")
    console.print(f"database: {escape(summary['database_url'])}")
    console.print(f"worker log: {escape(summary['log_file'])}; summary: "
                  f"{escape(summary['results_file'].rsplit('/', 1)[0])}/summary.json")
    if summary.get("interrupted"):
        console.print(
            "[bold yellow]interrupted[/bold yellow]: unfinished jobs stay in the database; run the demo again to finish them"
        )
    if ok:
        console.print("[bold green]every job ended as designed[/bold green]")
    elif summary.get("interrupted"):
        console.print(f"[bold red]not finished[/bold red]: {summary['unfinished']:,} job(s) have not ended yet")
    else:
        if summary["problem_count"]:
            console.print(f"[bold red]{summary['problem_count']:,} job(s) did not end as designed[/bold red]")
        for problem in summary["problems"][:10]:
            console.print(f"  - {escape(str(problem))}")
        if summary["problem_count"] > 10:
            console.print(
                f"  ... and {summary['problem_count'] - 10:,} more in {summary['results_file'].rsplit('/', 1)[0]}/summary.json"
            )
        if summary["other_trees_unfinished"]:
            console.print(
                f"[bold red]{summary['other_trees_unfinished']:,} demo job(s) of other trees are still queued, "
                "running or retrying[/bold red]"
            )


__all__ = ["Plans", "percentile", "print_summary", "summarise", "unfinished"]
