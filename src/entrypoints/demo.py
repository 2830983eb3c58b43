"""``tether demo``: hash every file of a real directory tree as durable jobs, and report.

What it does, in order:

1. Finds the files: every ``--pattern`` (default ``*.py``) file under ``--path`` (default: this
   Python's standard library, ``sysconfig.get_paths()["stdlib"]``), skipping ``site-packages``,
   ``dist-packages`` and ``__pycache__`` folders and symbolic links.
2. Opens the store: by default a SQLite file ``<out>/demo.db`` (``--out`` defaults to
   ``./tether-demo``); ``--database-url`` picks another (``memory://``, PostgreSQL).
3. Enqueues one ``demo.file_stats`` job per file on queue ``demo``, in batches, with the file's
   absolute path as idempotency key: a second run over the same tree adds nothing and says
   "0 new jobs, N already known".
4. Runs a worker pool (``--workers`` threads) until no demo job is queued, retrying or running,
   with a progress bar.  Each job computes SHA-256, lines and words of its file and appends them
   to ``<out>/results.jsonl``.  A planned share of jobs fails (see
   :mod:`tether.entrypoints.demo_tasks`): transient failures retry with a short backoff
   (base 0.05 s, cap 1 s), permanent ones go ``dead`` at once.
5. Prints a summary (counts by status, jobs/s, enqueue-to-start latency p50/p99, where the
   results and the database are), writes it to ``<out>/summary.json``, and returns True only if
   every job of the tree ended as designed: completed with its result stored, or dead exactly
   where the plan says "permanent"; and no demo job is left queued, running or retrying.

The demo reads no ``TETHER_*`` variables: its flags alone decide, so a run is reproducible.
"""

from __future__ import annotations

import logging
import math
import os
import sysconfig
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from tether.domain.errors import PermanentError, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.demo_tasks import PlannedFailure, ResultsFile, failure_plan, file_stats
from tether.entrypoints.settings import InvalidSetting, check_redis_url, database_kind, redact_url, sqlite_path
from tether.ports.clock import Clock

if TYPE_CHECKING:
    from tether.entrypoints.context import JobContext
    from tether.entrypoints.service import Tether

JOB_TYPE = "demo.file_stats"
QUEUE = "demo"
MAX_ATTEMPTS = 3
DEMO_RETRY_POLICY = RetryPolicy(base_seconds=0.05, cap_seconds=1.0, jitter=0.1)
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
ENQUEUE_BATCH = 500
KEY_PREFIX = "demo:"
MAX_KEY_CHARS = 255


def default_path() -> Path:
    """This Python's standard library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


@attrs.frozen
class DemoOptions:
    """Validated options of one demo run (build with :meth:`create`)."""

    root: Path
    pattern: str
    database_url: str
    redis_url: str | None
    redis_prefix: str
    schema: str | None
    workers: int
    out: Path
    fresh: bool
    default_database: bool

    @classmethod
    def create(
        cls,
        *,
        path: str | None = None,
        pattern: str = "*.py",
        database_url: str | None = None,
        redis_url: str | None = None,
        redis_prefix: str = "tether",
        schema: str | None = None,
        workers: int = 4,
        out: str = "tether-demo",
        fresh: bool = False,
    ) -> DemoOptions:
        """Check the options before anything is created.

        Raises:
            ValidationError: ``path`` is not a directory, ``pattern`` is empty, ``workers`` is not
                1-256, ``fresh`` with a database that is not a SQLite file or ``memory://``, or a
                bad ``database_url`` / ``redis_url`` (the CLI names ``--database-url`` / ``--redis-url``).
        """
        root = Path(path).expanduser() if path is not None else default_path()
        if not root.is_dir():
            raise ValidationError("path", f"{str(root)!r} is not a directory")
        if not pattern or "/" in pattern or os.sep in pattern:
            raise ValidationError("pattern", f"must be a file-name glob such as '*.py', got {pattern!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
            raise ValidationError("workers", f"must be an integer from 1 to 256, got {workers!r}")
        out_dir = Path(out).expanduser().resolve()
        if out_dir.exists() and not out_dir.is_dir():
            raise ValidationError("out", f"{str(out_dir)!r} exists and is not a directory")
        default_database = database_url is None
        if database_url is None:
            database_url = f"sqlite:///{out_dir / 'demo.db'}"
        try:
            kind = database_kind(database_url)
            check_redis_url(redis_url)
        except InvalidSetting as error:  # the demo reads no TETHER_* variable: name the flag alone
            raise ValidationError(error.setting, error.problem) from None
        if fresh and kind == "postgresql":
            raise ValidationError(
                "fresh", f"only a SQLite file or memory:// can be started afresh; for {redact_url(database_url)} use a new --schema"
            )
        return cls(
            root=root.resolve(),
            pattern=pattern,
            database_url=database_url,
            redis_url=redis_url,
            redis_prefix=redis_prefix,
            schema=schema,
            workers=workers,
            out=out_dir,
            fresh=fresh,
            default_database=default_database,
        )

    @property
    def results_path(self) -> Path:
        return self.out / "results.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.out / "summary.json"

    @property
    def log_path(self) -> Path:
        return self.out / "worker.log"


def find_files(root: Path, pattern: str) -> list[Path]:
    """Regular files matching ``pattern`` under ``root``, sorted, without symlinks and skipped folders."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d)))
        for name in filenames:
            full = Path(dirpath) / name
            if full.match(pattern) and not full.is_symlink() and full.is_file():
                found.append(full)
    found.sort()
    return found


def relative_key(root: Path, path: Path) -> str:
    """``path`` relative to ``root`` with ``/`` separators (the input of the failure plan)."""
    return path.relative_to(root).as_posix()


def idempotency_key(path: Path) -> str:
    """``demo:<absolute path>``, or ``demo:sha256:<hex of the path>`` when that would pass 255 characters."""
    key = KEY_PREFIX + str(path)
    if len(key) <= MAX_KEY_CHARS:
        return key
    import hashlib

    return KEY_PREFIX + "sha256:" + hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in (0, 1]) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _remove_sqlite_file(url: str) -> None:
    path = sqlite_path(url)
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(path + suffix)
        if candidate.exists():
            candidate.unlink()


class _Recorder:
    """Enqueue-to-start latencies of the jobs this run enqueued, each measured at its first start.

    Jobs enqueued by an earlier run (left unfinished, or put back by ``tether retry``) are not
    measured: their ``created_at`` is that earlier enqueue, so the time to their start here would
    say nothing about this run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._not_started: set[int] = set()
        self.latencies: list[float] = []

    def enqueued(self, job_ids: Iterable[int]) -> None:
        """Measure these jobs (created by this run) at their first start."""
        with self._lock:
            self._not_started.update(job_ids)

    def started(self, job_id: int, seconds: float) -> None:
        """Job ``job_id`` started ``seconds`` after its enqueue; kept only for its first start
        and only if this run enqueued it."""
        with self._lock:
            if job_id in self._not_started:
                self._not_started.discard(job_id)
                self.latencies.append(seconds)


def make_handler(results: ResultsFile, recorder: _Recorder, clock: Clock) -> Any:
    """The ``demo.file_stats`` handler over ``results``; it reports each start to ``recorder``
    (time since enqueue, measured on ``clock``: the app's own, the one ``created_at`` came from)."""

    def file_stats_job(payload: dict[str, Any], ctx: JobContext) -> None:
        started = clock.now()
        job = ctx.job
        recorder.started(job.id, (started - job.created_at).total_seconds())
        plan = failure_plan(payload["rel"])
        if plan.permanent:
            raise PermanentError("planned permanent failure (demo)")
        if job.attempts <= plan.transient_failures:
            raise PlannedFailure(f"planned transient failure on attempt {job.attempts} (demo)")
        stats = file_stats(payload["path"])
        results.append(
            {
                "path": payload["path"],
                "rel": payload["rel"],
                "job_id": job.id,
                "attempt": job.attempts,
                **stats,
            }
        )

    return file_stats_job


def _all_demo_jobs(app: Tether) -> Iterator[Job]:
    offset = 0
    while True:
        page = app.list(queue=QUEUE, limit=1000, offset=offset)
        yield from page
        if len(page) < 1000:
            return
        offset += len(page)


def _unfinished(counts: dict[JobStatus, int]) -> int:
    return sum(counts.get(s, 0) for s in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRYING))


def run_demo(options: DemoOptions, *, console: Console | None = None) -> bool:
    """Run the demo described by ``options``; True when every job ended as designed.

    Raises:
        TetherError: bad options or an unusable store (before any job is enqueued).
    """
    from tether.entrypoints.container import connect
    from tether.entrypoints.service import EnqueueRequest

    console = console or Console()
    files = find_files(options.root, options.pattern)
    options.out.mkdir(parents=True, exist_ok=True)
    if options.fresh:
        if options.results_path.exists():
            options.results_path.unlink()
        if database_kind(options.database_url) == "sqlite":
            _remove_sqlite_file(options.database_url)
    results = ResultsFile(options.results_path)
    recorder = _Recorder()

    console.print(f"[bold]Tether demo[/bold]: {len(files):,} file(s) matching {options.pattern} under {options.root}")
    console.print(
        f"database: {redact_url(options.database_url)}"
        + (f"  dispatch: Redis Streams at {redact_url(options.redis_url)}" if options.redis_url else "  dispatch: polling")
    )

    log_handler = _log_to_file(options.log_path)
    app = connect(
        options.database_url,
        redis_url=options.redis_url,
        schema=options.schema,
        retry_policy=DEMO_RETRY_POLICY,
        poll_interval=0.2,
        # An unreachable Redis is an error at start here, rather than a quietly degraded run.
        redis_options={"prefix": options.redis_prefix, "require_connection": True, "sweep_interval": 0.5}
        if options.redis_url
        else None,
    )
    try:
        app.handler(JOB_TYPE, queue=QUEUE, max_attempts=MAX_ATTEMPTS)(make_handler(results, recorder, app.clock))

        plans: dict[str, Any] = {}
        requests = []
        for path in files:
            rel = relative_key(options.root, path)
            key = idempotency_key(path)
            plans[key] = (path, rel, failure_plan(rel))
            requests.append(
                EnqueueRequest(
                    JOB_TYPE, {"path": str(path), "rel": rel}, queue=QUEUE, max_attempts=MAX_ATTEMPTS, idempotency_key=key
                )
            )
        enqueue_started = time.perf_counter()
        created = 0
        for start in range(0, len(requests), ENQUEUE_BATCH):
            batch = app.enqueue_many(requests[start : start + ENQUEUE_BATCH])
            new_ids = [result.job.id for result in batch if result.created]
            recorder.enqueued(new_ids)
            created += len(new_ids)
        enqueue_seconds = time.perf_counter() - enqueue_started
        known = len(requests) - created
        console.print(
            f"{created:,} new job(s), {known:,} already known"
            + (
                f" (enqueued in {enqueue_seconds:.2f} s, {created / enqueue_seconds:,.0f} jobs/s)"
                if created and enqueue_seconds > 0
                else ""
            )
        )

        pending_at_start = _unfinished(app.counts(queue=QUEUE))
        pool = app.worker(
            concurrency=options.workers,
            queues=[QUEUE],
            lease_timeout=30.0,
            reap_interval=2.0,
            drain_timeout=5.0,
            max_wait=0.2,
        )
        run_started = time.perf_counter()
        interrupted = _run_with_progress(app, pool, pending_at_start, console)
        run_seconds = time.perf_counter() - run_started

        summary = _summarise(app, options, plans, results, recorder, pending_at_start, run_seconds, created, known)
        summary["interrupted"] = interrupted
        ok = bool(summary["as_designed"]) and not interrupted
        _print_summary(console, summary, ok)
        import json

        options.summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return ok
    finally:
        app.close()
        _stop_logging_to_file(log_handler)


def _log_to_file(path: Path) -> tuple[logging.Handler, int, bool]:
    """Send the ``tether`` loggers to ``path`` for the run, so worker messages (each dead
    letter is logged) do not break up the progress bar.  Returns what to restore."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("tether")
    saved = (handler, logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return saved


def _stop_logging_to_file(saved: tuple[logging.Handler, int, bool]) -> None:
    handler, level, propagate = saved
    logger = logging.getLogger("tether")
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate
    handler.close()


def _run_with_progress(app: Tether, pool: Any, pending_at_start: int, console: Console) -> bool:
    """Run ``pool`` to idle with a progress bar fed from the store's counts; True if interrupted."""
    done = threading.Event()
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task("draining", total=max(pending_at_start, 0))

    def watch() -> None:
        while not done.wait(0.1):
            try:
                left = _unfinished(app.counts(queue=QUEUE))
            except Exception:  # noqa: BLE001, S112 - the bar is cosmetic; the pool reports real errors
                continue
            progress.update(task, completed=max(pending_at_start - left, 0))

    watcher = threading.Thread(target=watch, name="tether-demo-progress", daemon=True)
    interrupted = False
    with progress:
        watcher.start()
        try:
            pool.run(stop_when_idle=True, install_signal_handlers=threading.current_thread() is threading.main_thread())
        except KeyboardInterrupt:
            interrupted = True
            pool.stop()
        finally:
            done.set()
            watcher.join()
            left = _unfinished(app.counts(queue=QUEUE))
            progress.update(task, completed=max(pending_at_start - left, 0))
    if _unfinished(app.counts(queue=QUEUE)) and not interrupted:
        # The pool returned (a signal asked it to stop) while jobs were left.
        interrupted = True
    return interrupted


def _summarise(
    app: Tether,
    options: DemoOptions,
    plans: dict[str, Any],
    results: ResultsFile,
    recorder: _Recorder,
    pending_at_start: int,
    run_seconds: float,
    created: int,
    known: int,
) -> dict[str, Any]:
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
    left = _unfinished(counts)
    unfinished = sum(tree_counts[status.value] for status in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRYING))
    # Each unfinished job of the tree is one problem above (and counted once); the queue may also
    # hold unfinished jobs of other trees (an earlier run with another --path).
    others = max(left - unfinished, 0)
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
        "unfinished": unfinished + others,
        "other_trees_unfinished": others,
        "as_designed": not problems and not others,
    }


def _print_summary(console: Console, summary: dict[str, Any], ok: bool) -> None:
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
    console.print(f"results: {summary['results_file']} ({summary['results_stored']:,} file(s))")
    console.print(f"database: {summary['database_url']}")
    console.print(f"worker log: {summary['log_file']}; summary: {summary['results_file'].rsplit('/', 1)[0]}/summary.json")
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
            console.print(f"  - {problem}")
        if summary["problem_count"] > 10:
            console.print(
                f"  ... and {summary['problem_count'] - 10:,} more in {summary['results_file'].rsplit('/', 1)[0]}/summary.json"
            )
        if summary["other_trees_unfinished"]:
            console.print(
                f"[bold red]{summary['other_trees_unfinished']:,} demo job(s) of other trees are still queued, "
                "running or retrying[/bold red]"
            )
