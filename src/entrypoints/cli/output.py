"""What the ``tether`` commands print: the stdout console, JSON, times, and jobs, worker entries and
explanations as JSON-ready data.

Text read from the store (idempotency keys, payloads, last errors, worker entries) was written by
someone else and may hold anything UTF-8 can: escape sequences, a right-to-left override, line
breaks, Rich markup.  The console reads no markup (:func:`stdout`), and every such text goes
through :func:`printable` on its way to the terminal, so it is shown, never obeyed.  JSON output
(``--json``) is left as it is: JSON escapes the C0 controls, and a program reads it.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from rich.console import Console
from tether.domain.explanation import Explanation
from tether.domain.history import Attempt, after_retry
from tether.domain.job import Job
from tether.domain.workers import WorkerEntry
from tether.entrypoints.durations import format_duration

#: Line width when stdout is a pipe or file and COLUMNS is unset: wide enough that no column of
#: ``jobs list`` is cut (Rich would assume 80), so ``| grep`` and ``> file`` see whole values.
PIPE_WIDTH = 400


def stdout(*, markup: bool = False) -> Console:
    """A console on the current stdout (made per call, so CliRunner's capture and COLUMNS apply);
    it reads no Rich markup unless ``markup`` (only for text of our own, with every interpolated
    value escaped: the demo's report), so ``[red]`` in a stored key is printed as it is."""
    console = Console(highlight=False, soft_wrap=True, markup=markup)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console


def printable(text: str) -> str:
    """``text`` with every character that is not printable (C0 and C1 controls such as ESC and
    CSI, line breaks, tabs, bidirectional overrides and other format characters) written as its
    Python escape (``\\x1b``, ``\\n``, ``\\u202e``); printable text is returned as it is."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON (non-ASCII characters as they are)."""
    print(json.dumps(value, indent=2, ensure_ascii=False))


def iso(value: datetime | None) -> str | None:
    """``value`` in ISO 8601 (with its offset), or None."""
    return value.isoformat() if value is not None else None


def short_time(value: datetime | None) -> str:
    """``value`` as ``YYYY-MM-DD HH:MM:SS`` (no offset; callers say "UTC"), or ``""``."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""


def job_to_dict(job: Job) -> dict[str, Any]:
    """A JSON-ready view of ``job`` (payload decoded, times ISO 8601 UTC, status as text, its
    attempt history as a list of :func:`attempt_to_dict`, oldest first)."""
    return {
        "id": job.id,
        "job_type": job.job_type,
        "queue": job.queue,
        "status": job.status.value,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "scheduled_at": iso(job.scheduled_at),
        "created_at": iso(job.created_at),
        "finished_at": iso(job.finished_at),
        "cancel_requested_at": iso(job.cancel_requested_at),
        "idempotency_key": job.idempotency_key,
        "concurrency_key": job.concurrency_key,
        "leased_by": job.leased_by,
        "lease_expires_at": iso(job.lease_expires_at),
        "last_error": job.last_error,
        "payload": job.payload,
        "history": [attempt_to_dict(attempt, retried) for attempt, retried in zip(job.history, after_retry(job.history))],
    }


def attempt_to_dict(attempt: Attempt, after_retry: bool = False) -> dict[str, Any]:
    """A JSON-ready view of one ended attempt (times ISO 8601 UTC, outcome as text;
    ``after_retry``: the first attempt after a manual retry, see
    :func:`~tether.domain.history.after_retry`)."""
    return {
        "attempt": attempt.number,
        "after_retry": after_retry,
        "worker_id": attempt.worker_id,
        "started_at": iso(attempt.started_at),
        "ended_at": iso(attempt.ended_at),
        "outcome": attempt.outcome.value,
        "error": attempt.error,
    }


def attempt_line(attempt: Attempt, after_retry: bool = False) -> str:
    """One line of ``jobs show`` for ``attempt``: number, outcome, start (UTC), how long it ran,
    worker, and the first line of its error (at most 200 characters); ``after_retry`` prefixes
    ``after a retry:`` (the attempts count from 1 again)."""
    took = "" if attempt.started_at is None else format_duration((attempt.ended_at - attempt.started_at).total_seconds())
    parts = [
        f"#{attempt.number:<3}", f"{attempt.outcome.value:<10}", short_time(attempt.started_at or attempt.ended_at),
        f"{took:>9}", attempt.worker_id or "?",
    ]
    if attempt.error:
        first = attempt.error.splitlines()[0] if attempt.error.strip() else attempt.error
        parts.append(first[:200])
    line = "  ".join(parts)
    return f"after a retry: {line}" if after_retry else line


def worker_to_dict(worker: WorkerEntry) -> dict[str, Any]:
    """A JSON-ready view of a worker registry entry (times ISO 8601 UTC; ``queues`` null: every queue)."""
    return {
        "worker_id": worker.worker_id,
        "status": worker.status,
        "host": worker.host,
        "pid": worker.pid,
        "queues": None if worker.queues is None else list(worker.queues),
        "job_types": list(worker.job_types),
        "concurrency": worker.concurrency,
        "dispatcher": worker.dispatcher,
        "version": worker.version,
        "heartbeat_interval": worker.heartbeat_interval,
        "started_at": iso(worker.started_at),
        "last_seen_at": iso(worker.last_seen_at),
    }


def fact_value(value: Any) -> Any:
    """A fact's value as JSON: times ISO 8601, names as a list, the rest as it is."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def explanation_to_dict(explanation: Explanation) -> dict[str, Any]:
    """A JSON-ready view of ``app.explain``'s answer: the verdict, its reason, and the facts by name."""
    return {
        "job_id": explanation.job_id,
        "status": explanation.status.value,
        "reason": explanation.reason,
        "verdict": explanation.verdict,
        "facts": {fact.name: fact_value(fact.value) for fact in explanation.facts},
    }


__all__ = [
    "PIPE_WIDTH",
    "attempt_line",
    "attempt_to_dict",
    "explanation_to_dict",
    "fact_value",
    "iso",
    "job_to_dict",
    "print_json",
    "printable",
    "short_time",
    "stdout",
    "worker_to_dict",
]
