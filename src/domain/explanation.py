"""Why a job is where it is: the rules behind ``tether jobs why`` and ``app.explain``, pure given the facts.

:func:`explain` takes :class:`JobFacts` (the job, ``now``, the worker registry's entries, how many due
jobs go first) and tries :data:`RULES` in order; the first rule that applies gives the one-line
verdict, named by its reason.  Adding a reason (a paused queue, a queue at its limit, a requested
cancellation) is one more function here and one more line in :data:`RULES`, at the place where it
should win over the rules after it (plus the fact it needs on :class:`JobFacts`).

Nothing here reads a store: the caller (:meth:`tether.Tether.explain`) gathers the facts.  The
facts shown never include a lease token.  Times are aware UTC and shown as
``YYYY-MM-DD HH:MM:SS UTC``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import attrs
from tether.domain.job import Job, JobStatus
from tether.domain.queues import QueueState, window_start_micros
from tether.domain.schedules import tick_of
from tether.domain.timeutil import from_micros
from tether.domain.workers import WorkerEntry

#: ``count_due_ahead`` counts at most this many jobs; a count that reaches it reads "10,000+".
DUE_AHEAD_LIMIT = 10_000
#: Longest error text quoted in a verdict (its first line only); the facts hold it in full.
VERDICT_ERROR_CHARS = 200
#: Most worker ids listed in one fact.
LISTED_WORKERS = 5

FactValue = str | int | bool | datetime | tuple[str, ...] | None


@attrs.frozen
class JobFacts:
    """What the rules may look at.

    Attributes:
        job: the job as stored.
        now: the instant of the reading (aware UTC).
        workers: every entry of the worker registry (``gone`` set at ``now``), or None when the
            store keeps no registry (the rules about workers then say nothing).
        due_ahead: how many due jobs of the job's queue go before it (at most ``due_ahead_limit``),
            or None when not counted (the job is not due).
        due_ahead_limit: the most ``due_ahead`` counts.
        queue_state: the stored controls of the job's queue (None: none stored: active, no limit).
        queue_running: how many jobs of the job's queue are running, or None when not counted
            (the queue has no running limit).
        key_running: how many jobs of the job's queue with its ``concurrency_key`` run under
            unexpired leases, or None when not counted (no key, or no per-key limit).
    """

    job: Job
    now: datetime
    workers: tuple[WorkerEntry, ...] | None = None
    due_ahead: int | None = None
    due_ahead_limit: int = DUE_AHEAD_LIMIT
    queue_state: QueueState | None = None
    queue_running: int | None = None
    key_running: int | None = None

    @property
    def live_handlers(self) -> tuple[WorkerEntry, ...] | None:
        """Live workers that lease from the job's queue and have a handler for its type (None: no registry)."""
        if self.workers is None:
            return None
        return tuple(w for w in self.workers if not w.gone and w.serves(self.job.queue, self.job.job_type))

    @property
    def holder(self) -> WorkerEntry | None:
        """The registry entry of the worker holding the job's lease, if it has one."""
        if self.workers is None or self.job.leased_by is None:
            return None
        return next((w for w in self.workers if w.worker_id == self.job.leased_by), None)


@attrs.frozen
class Fact:
    """One fact behind a verdict: a name (``lease_expires_at``) and its value."""

    name: str
    value: FactValue


@attrs.frozen
class Explanation:
    """Why a job is where it is.

    Attributes:
        job_id: the job.
        status: its status.
        reason: the name of the rule that gave the verdict (``"scheduled"``, ``"paused"``,
            ``"no_worker"``, ``"limited"``, ``"rate_limited"``, ``"running"``, ``"waiting"``, ``"next"``, ``"retrying"``,
            ``"dead"``, ``"completed"``).
        verdict: one line saying why.
        facts: what the verdict rests on, in a fixed order (never a lease token).
    """

    job_id: int
    status: JobStatus
    reason: str
    verdict: str
    facts: tuple[Fact, ...]

    def fact(self, name: str) -> FactValue:
        """The value of the fact ``name``, or None when it is not among the facts."""
        return next((f.value for f in self.facts if f.name == name), None)


# -- wording ---------------------------------------------------------------------------------------
def at(value: datetime) -> str:
    """``value`` as ``YYYY-MM-DD HH:MM:SS UTC``."""
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def span(delta: timedelta) -> str:
    """A duration in words, to the second: ``45 s``, ``12 min 5 s``, ``3 h 4 min``, ``2 d 3 h``."""
    seconds = max(int(delta.total_seconds()), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    for big, big_unit, small, small_unit in (
        (days, "d", hours, "h"), (hours, "h", minutes, "min"), (minutes, "min", seconds, "s")
    ):
        if big:
            return f"{big} {big_unit}" + (f" {small} {small_unit}" if small else "")
    return f"{seconds} s"


def plural(count: int, word: str) -> str:
    """``1 attempt``, ``3 attempts``."""
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def quoted_error(error: str) -> str:
    """The first line of ``error``, at most :data:`VERDICT_ERROR_CHARS` characters."""
    first = error.strip().splitlines()[0] if error.strip() else ""
    return first if len(first) <= VERDICT_ERROR_CHARS else first[: VERDICT_ERROR_CHARS - 1] + "…"


def count_ahead(facts: JobFacts) -> str:
    """``due_ahead`` as shown: ``1,234``, or ``10,000+`` when the count reached its limit."""
    n = facts.due_ahead or 0
    return f"{facts.due_ahead_limit:,}+" if n >= facts.due_ahead_limit else f"{n:,}"


# -- the rules, in order ---------------------------------------------------------------------------
Rule = Callable[[JobFacts], str | None]


def completed(facts: JobFacts) -> str | None:
    job = facts.job
    if job.status is not JobStatus.COMPLETED or job.finished_at is None:
        return None
    return f"completed at {at(job.finished_at)} after {plural(job.attempts, 'attempt')}"


def dead(facts: JobFacts) -> str | None:
    job = facts.job
    if job.status is not JobStatus.DEAD:
        return None
    error = f"; last error: {quoted_error(job.last_error)}" if job.last_error else ""
    return f"dead after {plural(job.attempts, 'attempt')}{error}"


def running(facts: JobFacts) -> str | None:
    job = facts.job
    if job.status is not JobStatus.RUNNING:
        return None
    since = f" since {at(job.leased_at)}" if job.leased_at is not None else ""
    text = f"running on worker {job.leased_by}{since}"
    if job.lease_expires_at is not None:
        if job.lease_expired(facts.now):
            text += f"; its lease expired at {at(job.lease_expires_at)}, so the reaper takes it back at its next pass"
        else:
            text += f", lease until {at(job.lease_expires_at)}"
    if facts.workers is not None:
        holder = facts.holder
        if holder is None:
            text += f" (worker {job.leased_by} is not in the worker registry)"
        else:
            ago = span(facts.now - holder.last_seen_at)
            text += f" (worker {holder.worker_id} is {holder.status}, last seen {ago} ago)"
    return text


def scheduled(facts: JobFacts) -> str | None:
    job = facts.job
    if job.status is not JobStatus.QUEUED or job.is_due(facts.now):
        return None
    return f"scheduled for later: due at {at(job.scheduled_at)}, in {span(job.scheduled_at - facts.now)}"


def retrying(facts: JobFacts) -> str | None:
    job = facts.job
    if job.status is not JobStatus.RETRYING or job.is_due(facts.now):
        return None
    error = f" with {quoted_error(job.last_error)}" if job.last_error else ""
    return (
        f"retrying at {at(job.scheduled_at)} (in {span(job.scheduled_at - facts.now)}) "
        f"after attempt {job.attempts} failed{error}"
    )


def paused(facts: JobFacts) -> str | None:
    job, state = facts.job, facts.queue_state
    if not job.is_due(facts.now) or state is None or not state.paused:
        return None
    since = f" since {at(state.updated_at)}" if state.updated_at is not None else ""
    return f"queue {job.queue} is paused{since}: no worker starts its jobs until it is resumed"


def at_limit(facts: JobFacts) -> str | None:
    job, state, running_now = facts.job, facts.queue_state, facts.queue_running
    if not job.is_due(facts.now) or state is None or state.max_running is None or running_now is None:
        return None
    if running_now < state.max_running:
        return None
    return (
        f"queue {job.queue} is at its running limit: {running_now:,} of at most {state.max_running:,} jobs running; "
        "the next slot freed goes to the first job in line"
    )


def at_key_limit(facts: JobFacts) -> str | None:
    job, state, running_now = facts.job, facts.queue_state, facts.key_running
    if not job.is_due(facts.now) or state is None or state.max_running_per_key is None or running_now is None:
        return None
    if job.concurrency_key is None or running_now < state.max_running_per_key:
        return None
    return (
        f"waiting: {plural(running_now, 'job')} of concurrency key {job.concurrency_key} already running, "
        f"the queue's per-key limit (at most {state.max_running_per_key:,} per key)"
    )


def rate_limited(facts: JobFacts) -> str | None:
    job, state = facts.job, facts.queue_state
    if not job.is_due(facts.now) or state is None or state.rate_limit is None or state.rate_period_micros is None:
        return None
    if state.started_in_window(facts.now) < state.rate_limit:
        return None
    period = state.rate_period_micros
    next_window = from_micros(window_start_micros(facts.now, period) + period)
    return (
        f"queue {job.queue} is at its rate limit: {state.rate_limit:,} jobs started in this window of "
        f"{state.rate_period:g} s; the next window begins at {at(next_window)}"
    )


def no_worker(facts: JobFacts) -> str | None:
    job = facts.job
    handlers = facts.live_handlers
    if not job.is_due(facts.now) or handlers is None or handlers:
        return None
    return f"no live worker handles job type {job.job_type} on queue {job.queue}"


def waiting(facts: JobFacts) -> str | None:
    job = facts.job
    if not job.is_due(facts.now) or not facts.due_ahead:
        return None
    jobs, go = ("job", "goes") if facts.due_ahead == 1 else ("jobs", "go")
    return f"waiting behind {count_ahead(facts)} due {jobs} of queue {job.queue} that {go} first"


def next_in_line(facts: JobFacts) -> str | None:
    job = facts.job
    if not job.is_due(facts.now):
        return None
    return f"due since {at(job.scheduled_at)} and first in line on queue {job.queue}: the next lease there takes it"


def status_only(facts: JobFacts) -> str | None:
    """The last resort, for a status no rule above knows."""
    return f"{facts.job.status.value}"


#: The rules, tried in order: (reason, rule).  The first that applies gives the verdict.
RULES: tuple[tuple[str, Rule], ...] = (
    ("completed", completed),
    ("dead", dead),
    ("running", running),
    ("scheduled", scheduled),
    ("retrying", retrying),
    ("paused", paused),
    ("no_worker", no_worker),
    ("limited", at_limit),
    ("key_limited", at_key_limit),
    ("rate_limited", rate_limited),
    ("waiting", waiting),
    ("next", next_in_line),
    ("status", status_only),
)


# -- the facts -------------------------------------------------------------------------------------
def _listed(workers: tuple[WorkerEntry, ...]) -> tuple[str, ...]:
    ids = tuple(w.worker_id for w in workers[:LISTED_WORKERS])
    return ids + ((f"and {len(workers) - LISTED_WORKERS} more",) if len(workers) > LISTED_WORKERS else ())


def gather(facts: JobFacts) -> tuple[Fact, ...]:
    """The facts shown with a verdict, in order; those that do not apply to the job's status are left out."""
    job = facts.job
    shown: list[tuple[str, FactValue]] = [
        ("status", job.status.value),
        ("job_type", job.job_type),
        ("queue", job.queue),
        ("priority", job.priority),
        ("attempts", job.attempts),
        ("max_attempts", job.max_attempts),
        ("created_at", job.created_at),
    ]
    tick = tick_of(job.idempotency_key)
    if tick is not None:  # a periodic tick's job: which schedule, which tick
        shown += [("schedule", tick[0]), ("tick", tick[1])]
    if job.status.is_leasable:
        shown.append(("due_at", job.scheduled_at))
        if facts.due_ahead is not None:
            shown += [("due_ahead", facts.due_ahead), ("due_ahead_capped", facts.due_ahead >= facts.due_ahead_limit)]
        handlers = facts.live_handlers
        if handlers is not None:
            shown.append(("live_workers", _listed(handlers)))
        if facts.queue_state is not None:
            state = facts.queue_state
            shown += [("queue_paused", state.paused), ("queue_max_running", state.max_running)]
            if state.rate_limit is not None:
                shown += [("queue_rate_limit", state.rate_limit), ("queue_rate_period", f"{state.rate_period:g} s"),
                          ("queue_started_in_window", state.started_in_window(facts.now))]
            if state.max_running_per_key is not None:
                shown.append(("queue_max_running_per_key", state.max_running_per_key))
        if facts.queue_running is not None:
            shown.append(("queue_running", facts.queue_running))
        if job.concurrency_key is not None:
            shown.append(("concurrency_key", job.concurrency_key))
        if facts.key_running is not None:
            shown.append(("key_running", facts.key_running))
    if job.status is JobStatus.RUNNING:
        shown += [("leased_by", job.leased_by), ("leased_at", job.leased_at), ("lease_expires_at", job.lease_expires_at)]
        if facts.workers is not None:
            holder = facts.holder
            shown.append(("worker_status", holder.status if holder is not None else "unknown"))
            if holder is not None:
                shown.append(("worker_last_seen_at", holder.last_seen_at))
    if job.finished_at is not None:
        shown.append(("finished_at", job.finished_at))
    if job.last_error is not None:
        shown.append(("last_error", job.last_error))
    return tuple(Fact(name, value) for name, value in shown)


def explain(facts: JobFacts) -> Explanation:
    """The verdict of the first rule of :data:`RULES` that applies, with the facts behind it."""
    for reason, rule in RULES:
        verdict = rule(facts)
        if verdict is not None:
            return Explanation(facts.job.id, facts.job.status, reason, verdict, gather(facts))
    raise AssertionError("the last rule always applies")  # pragma: no cover


__all__ = [
    "DUE_AHEAD_LIMIT",
    "RULES",
    "Explanation",
    "Fact",
    "JobFacts",
    "Rule",
    "explain",
    "gather",
]
