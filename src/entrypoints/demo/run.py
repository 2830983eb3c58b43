"""One ``tether demo`` run: find the files, enqueue a job per file, run a worker pool to idle with a progress bar, report."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tether.entrypoints.demo.options import DEMO_RETRY_POLICY, JOB_TYPE, MAX_ATTEMPTS, QUEUE, DemoOptions
from tether.entrypoints.demo.report import Plans, print_summary, summarise, unfinished
from tether.entrypoints.demo.tasks import LatencyRecorder, ResultsFile, failure_plan, make_handler
from tether.entrypoints.settings import database_kind, redact_url, sqlite_path

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether

SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
ENQUEUE_BATCH = 500
KEY_PREFIX = "demo:"
MAX_KEY_CHARS = 255


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
    return KEY_PREFIX + "sha256:" + hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()


def _remove_sqlite_file(url: str) -> None:
    path = sqlite_path(url)
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(path + suffix)
        if candidate.exists():
            candidate.unlink()


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
    recorder = LatencyRecorder()

    console.print(f"[bold]Tether demo[/bold]: {len(files):,} file(s) matching {escape(str(options.pattern))} under "
                  f"{escape(str(options.root))}")
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

        plans: Plans = {}
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

        pending_at_start = unfinished(app.counts(queue=QUEUE))
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

        summary = summarise(app, options, plans, results, recorder, pending_at_start, run_seconds, created, known)
        summary["interrupted"] = interrupted
        ok = bool(summary["as_designed"]) and not interrupted
        print_summary(console, summary, ok)
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
                left = unfinished(app.counts(queue=QUEUE))
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
            left = unfinished(app.counts(queue=QUEUE))
            progress.update(task, completed=max(pending_at_start - left, 0))
    if unfinished(app.counts(queue=QUEUE)) and not interrupted:
        # The pool returned (a signal asked it to stop) while jobs were left.
        interrupted = True
    return interrupted


__all__ = ["ENQUEUE_BATCH", "KEY_PREFIX", "MAX_KEY_CHARS", "SKIP_DIRS", "find_files", "idempotency_key", "relative_key", "run_demo"]
