"""Run every due job inline, in the test's own thread: :func:`drain` and its :class:`DrainReport`.

Each job goes through :func:`tether.entrypoints.execution.execute_job`, the very step the worker
pool runs for each lease: the registered handler is called with the payload (and a
:class:`~tether.entrypoints.context.JobContext` if it takes one), and its outcome is written under
the lease's fencing token: ``completed``; ``retrying`` after the retry policy's backoff;
``dead`` for a :class:`~tether.domain.errors.PermanentError` or for used-up attempts; ``queued``
again, later, for a :class:`~tether.domain.snooze.Snooze`; ``cancelled`` when the job was
cancelled while its handler ran.  ``on_failure`` hooks run as in a worker.

Jobs of a type the app has no handler for are never leased: they are left as they are and
reported as pending (a worker pool would hand them back for another worker; a drain has no other
worker to leave them to), and they never keep the drain going.

With ``advance_clock=True`` (the default) and nothing due, the app's
:class:`~tether.adapters.clock.FakeClock` jumps to the earliest ``scheduled_at`` of the queued and
retrying jobs it can run and the drain goes on, so a job that fails twice and then succeeds is
run three times by one ``drain(app)`` call, each attempt at its exact retry time.  A periodic
tick's job (enqueued ahead by a worker pool) never moves the clock: ``drain`` does not wait for
ticks not yet due, and it enqueues no tick itself.

``async def`` handlers (and async failure hooks) run too: under :func:`drain` each on an event
loop of its own; under ``await`` :func:`adrain`, inside an async test, on the test's own loop (so
they may use what the test opened on it), while the rest of the drain runs on a worker thread and
the loop stays free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any

import attrs
from tether.adapters.clock import FakeClock
from tether.domain.errors import LeaseLost, TetherError, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.schedules import is_tick_key
from tether.domain.timeutil import ensure_utc
from tether.domain.validation import validate_int, validate_queue, validate_seconds, validate_worker_id
from tether.entrypoints.context import JobContext
from tether.entrypoints.execution import Execution, Outcome, execute_job
from tether.entrypoints.service import Tether
from tether.testing.assertions import _all_jobs

#: Worker id of the leases a drain takes.
DRAIN_WORKER_ID = "tether-testing-drain"


@attrs.frozen
class JobRun:
    """One attempt that :func:`drain` ran.

    Attributes:
        job_id, job_type, queue: the job's.
        payload: the decoded payload the handler received.
        attempt: which attempt this was, counted from 1.
        outcome: ``"completed"``, ``"retrying"``, ``"dead"``, ``"snoozed"``, ``"cancelled"`` or
            ``"not_recorded"`` (the handler lost its lease, e.g. after its own ``ctx.heartbeat()``
            was refused); an :class:`~tether.entrypoints.execution.Outcome`, which compares equal
            to those strings.
        error: the failure text stored as ``last_error`` (None when it completed).
        ran_at: the fake clock's time when the attempt was leased (aware UTC).
        retry_at: when a ``retrying`` or snoozed job runs next (aware UTC), else None.
        job: the job as written after the attempt.
        exception: what the handler raised, or None.
    """

    job_id: int
    job_type: str
    queue: str
    payload: Any
    attempt: int
    outcome: Outcome
    error: str | None
    ran_at: datetime
    retry_at: datetime | None
    job: Job = attrs.field(repr=False)
    exception: BaseException | None = attrs.field(default=None, eq=False, repr=False)

    def describe(self) -> str:
        """One line: ``#id type attempt N -> outcome (error)``."""
        text = f"#{self.job_id} {self.job_type} attempt {self.attempt} at {self.ran_at.isoformat()} -> {self.outcome.value}"
        if self.retry_at is not None:
            text += f" (next at {self.retry_at.isoformat()})"
        if self.error:
            first = self.error.splitlines()[0] if self.error.strip() else self.error
            text += f": {first[:200]}"
        return text


@attrs.frozen
class DrainReport:
    """What one :func:`drain` call ran, in order.

    Attributes:
        runs: every attempt, in the order they ran.
        clock_moves: the instants the fake clock was moved to, in order (empty when it stayed).
        pending: queued or retrying jobs left when the drain stopped (not due yet with
            ``advance_clock=False``, scheduled after ``until``, or of a type the app has no
            handler for), by ascending id.
    """

    runs: tuple[JobRun, ...]
    clock_moves: tuple[datetime, ...] = ()
    pending: tuple[Job, ...] = ()

    def _with(self, outcome: Outcome) -> list[JobRun]:
        return [run for run in self.runs if run.outcome is outcome]

    @property
    def completed(self) -> list[JobRun]:
        """Attempts that completed their job."""
        return self._with(Outcome.COMPLETED)

    @property
    def retrying(self) -> list[JobRun]:
        """Attempts that failed and left the job ``retrying``."""
        return self._with(Outcome.RETRYING)

    @property
    def dead(self) -> list[JobRun]:
        """Attempts that sent their job to ``dead`` (permanent error, attempts used up)."""
        return self._with(Outcome.DEAD)

    @property
    def cancelled(self) -> list[JobRun]:
        """Attempts whose job was cancelled while the handler ran (recorded as ``cancelled``)."""
        return self._with(Outcome.CANCELLED)

    @property
    def snoozed(self) -> list[JobRun]:
        """Attempts whose handler raised ``Snooze`` (the job is ``queued`` again, due later)."""
        return self._with(Outcome.SNOOZED)

    @property
    def failed(self) -> list[JobRun]:
        """Attempts that failed (``retrying`` and ``dead`` runs)."""
        return [run for run in self.runs if run.outcome in (Outcome.RETRYING, Outcome.DEAD)]

    @property
    def job_types(self) -> list[str]:
        """The job type of every attempt, in order."""
        return [run.job_type for run in self.runs]

    def of_type(self, job_type: str) -> list[JobRun]:
        """Attempts of jobs of this type, in order."""
        return [run for run in self.runs if run.job_type == job_type]

    def for_job(self, job_id: int) -> list[JobRun]:
        """Attempts of this job, in order."""
        return [run for run in self.runs if run.job_id == job_id]

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[JobRun]:
        return iter(self.runs)

    def __str__(self) -> str:
        counts = f"{len(self.completed)} completed, {len(self.retrying)} retrying, {len(self.dead)} dead"
        if self.snoozed or self.cancelled:
            counts += f", {len(self.snoozed)} snoozed, {len(self.cancelled)} cancelled"
        lines = [f"drain ran {len(self.runs)} attempt(s): {counts}"]
        lines.extend("  " + run.describe() for run in self.runs)
        if self.pending:
            lines.append(f"  left pending: {', '.join(f'#{j.id} {j.job_type} at {j.scheduled_at.isoformat()}' for j in self.pending[:20])}")
        return "\n".join(lines)


class DrainLimitExceeded(TetherError):
    """:func:`drain` ran ``max_jobs`` attempts and work was still due: probably a handler that
    enqueues forever.  ``report`` holds what ran."""

    def __init__(self, report: DrainReport, max_jobs: int) -> None:
        self.report = report
        last = "\n".join(run.describe() for run in report.runs[-5:])
        super().__init__(f"drain stopped after max_jobs={max_jobs} attempts with work still due; last runs:\n{last}")


class _InlineWriter:
    """Writes at once; a refused fence means nothing is recorded; any other error propagates."""

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx

    def begin_finish(self) -> bool:
        return not self._ctx.lease_lost

    def write(self, what: str, write: Callable[[], Job]) -> Job | None:
        try:
            return write()
        except LeaseLost:
            return None


#: Set by :func:`adrain`: runs a coroutine of an async handler on the test's loop and waits for it.
_run_coroutine: ContextVar[Callable[[Awaitable[Any]], Any] | None] = ContextVar("tether_drain_loop", default=None)


def _no_jitter() -> float:
    return 0.0


def _first_runnable(app: Tether, queues: Sequence[str] | None, now: datetime) -> Job | None:
    """The first due job in lease order whose type has a handler, or None.

    Due jobs are read in lease order (``due_jobs``), one at first and more while only jobs without
    a handler come back; nothing is leased, so the others stay exactly as they are."""
    limit = 1
    while True:
        due = app.repository.due_jobs(now=now, queues=queues, limit=limit)
        for job in due:
            if job.job_type in app.handlers:
                return job
        if len(due) < limit:
            return None
        limit *= 8


def _waiting(app: Tether, queues: Sequence[str] | None) -> list[Job]:
    """Queued and retrying jobs (of these queues), by ascending id."""
    found = [
        job
        for status in (JobStatus.QUEUED, JobStatus.RETRYING)
        for queue in (queues if queues is not None else [None])
        for job in _all_jobs(app, queue=queue, status=status)
    ]
    return sorted(found, key=lambda job: job.id)


def drain(
    app: Tether,
    *,
    advance_clock: bool = True,
    max_jobs: int = 10_000,
    queues: Sequence[str] | None = None,
    until: datetime | timedelta | None = None,
    lease_timeout: float = 900.0,
    jitter: Callable[[], float] = _no_jitter,
) -> DrainReport:
    """Run every due job of ``app`` inline, one at a time in lease order, until none is left.

    Jobs are leased straight from ``app.repository`` (priority DESC, scheduled_at ASC, id ASC),
    whatever the dispatcher, so jobs a handler enqueues are run by the same call once due.  Jobs
    of a type ``app`` has no handler for, and jobs of a paused queue, are skipped, left untouched
    and reported as pending; a queue's running limit holds as it does for workers.

    Args:
        app: the app (normally :func:`tether.testing.fake_app`'s) whose handlers run the jobs.
        advance_clock: when nothing is due, move ``app.clock`` (a FakeClock) to the earliest
            ``scheduled_at`` of the waiting jobs it can run and go on (retries, ``delay=`` jobs,
            snoozes); when False, stop instead.
        max_jobs: most attempts to run (1-10,000,000).
        queues: only these queues (None: all).
        until: never move the clock past this instant (an aware datetime, or a timedelta after
            the clock's time at the call); jobs scheduled later are left pending.
        lease_timeout: seconds each lease lasts (a handler that advances the fake clock past it
            loses its lease, as a real worker would).
        jitter: the ``r`` in [0, 1) of the retry jitter rule (:mod:`tether.domain.retry`) for each
            failure.  The default, always 0, makes each retry wait exactly the policy's
            shortest delay (its backoff, 1, 2, 4 ... s, up to ``cap / (1 + jitter)``: 240 s by
            default); pass ``random.random`` for the production spread.

    Returns:
        a :class:`DrainReport` of every attempt.

    Raises:
        ValidationError: a bad argument, or ``advance_clock`` on an app whose clock is not a
            FakeClock (pass ``advance_clock=False`` there).
        DrainLimitExceeded: ``max_jobs`` attempts ran and work is still due.
        Errors of the repository propagate (a handler's own errors are outcomes, never raised).
    """
    if not isinstance(app, Tether):
        raise ValidationError("app", f"must be a tether.Tether, got {type(app).__name__}")
    max_jobs = validate_int(max_jobs, "max_jobs", 1, 10_000_000)
    lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
    if queues is not None:
        if isinstance(queues, str) or not isinstance(queues, Sequence) or not queues:
            raise ValidationError("queues", f"must be a non-empty list of queue names or None, got {queues!r}")
        queues = [validate_queue(q, f"queues[{i}]") for i, q in enumerate(queues)]
    clock = app.clock
    if advance_clock and not isinstance(clock, FakeClock):
        raise ValidationError(
            "advance_clock", f"needs the app's clock to be a FakeClock, got {type(clock).__name__}; pass advance_clock=False"
        )
    if isinstance(until, timedelta):
        horizon: datetime | None = clock.now() + until
    elif until is not None:
        horizon = ensure_utc(until, "until")
    else:
        horizon = None
    if not callable(jitter):
        raise ValidationError("jitter", f"must be a callable returning a float in [0, 1), got {type(jitter).__name__}")
    worker_id = validate_worker_id(DRAIN_WORKER_ID)

    runs: list[JobRun] = []
    moves: list[datetime] = []

    def report(pending: Sequence[Job] = ()) -> DrainReport:
        return DrainReport(tuple(runs), tuple(moves), tuple(pending))

    def runnable(jobs: Sequence[Job]) -> list[Job]:
        """The jobs a worker could start once due: a handler for their type, their queue not paused;
        a periodic tick's job not yet due is no work to wait for (the clock never jumps to it)."""
        paused = {state.name for state in app.repository.queue_states() if state.paused}
        return [
            job for job in jobs
            if job.job_type in app.handlers and job.queue not in paused and not is_tick_key(job.idempotency_key)
        ]

    while True:
        now = clock.now()
        due = _first_runnable(app, queues, now)
        if len(runs) >= max_jobs:
            if due is not None:
                raise DrainLimitExceeded(report(), max_jobs)
            waiting = _waiting(app, queues)
            if advance_clock and any(horizon is None or job.scheduled_at <= horizon for job in runnable(waiting)):
                raise DrainLimitExceeded(report(waiting), max_jobs)
            return report(waiting)
        if due is not None:
            leased = app.repository.lease_job(due.id, worker_id=worker_id, now=now, lease_timeout=lease_timeout)
            if leased is None:  # due yet not leasable would be a repository bug; stop rather than spin
                return report(_waiting(app, queues))
            runs.append(_run(app, leased, worker_id=worker_id, lease_timeout=lease_timeout, jitter=jitter))
            continue
        waiting = _waiting(app, queues)
        if not advance_clock or not runnable(waiting):
            return report(waiting)
        earliest = min(job.scheduled_at for job in runnable(waiting))
        if earliest <= now or (horizon is not None and earliest > horizon):
            # due yet not leasable would be a repository bug; stop rather than spin
            return report(waiting)
        assert isinstance(clock, FakeClock)
        clock.set(earliest)
        moves.append(earliest)


def _run(app: Tether, job: Job, *, worker_id: str, lease_timeout: float, jitter: Callable[[], float]) -> JobRun:
    ctx = JobContext(job, repository=app.repository, clock=app.clock, lease_timeout=lease_timeout, worker_id=worker_id)
    ran_at = app.clock.now()
    result: Execution = execute_job(
        job, ctx, handlers=app.handlers, repository=app.repository, clock=app.clock,
        retry_policy=app.retry_policy, writer=_InlineWriter(ctx), worker_id=worker_id, rand=jitter,
        run_coroutine=_run_coroutine.get(),
    )
    written = result.job
    recorded = result.outcome is not Outcome.NOT_RECORDED
    return JobRun(
        job_id=job.id,
        job_type=job.job_type,
        queue=job.queue,
        payload=job.payload,
        attempt=job.attempts,
        outcome=result.outcome,
        error=(written.last_error if recorded and result.outcome in (Outcome.RETRYING, Outcome.DEAD) else result.error),
        ran_at=ran_at,
        retry_at=written.scheduled_at if result.outcome in (Outcome.RETRYING, Outcome.SNOOZED) else None,
        job=written,
        exception=result.exception,
    )


async def adrain(
    app: Tether,
    *,
    advance_clock: bool = True,
    max_jobs: int = 10_000,
    queues: Sequence[str] | None = None,
    until: datetime | timedelta | None = None,
    lease_timeout: float = 900.0,
    jitter: Callable[[], float] = _no_jitter,
) -> DrainReport:
    """:func:`drain` inside an async test: ``report = await adrain(app)``.

    Same arguments, report and errors.  ``async def`` handlers and hooks run on the calling event
    loop (one at a time, in lease order, as :func:`drain` runs every job); the store's reads and
    writes and plain handlers run on a worker thread, so the loop is never blocked meanwhile.
    """
    loop = asyncio.get_running_loop()

    def on_this_loop(awaitable: Awaitable[Any]) -> Any:
        async def wait() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wait(), loop).result()

    token = _run_coroutine.set(on_this_loop)
    try:
        return await asyncio.to_thread(
            drain, app, advance_clock=advance_clock, max_jobs=max_jobs, queues=queues, until=until,
            lease_timeout=lease_timeout, jitter=jitter,
        )
    finally:
        _run_coroutine.reset(token)


__all__ = ["DRAIN_WORKER_ID", "DrainLimitExceeded", "DrainReport", "JobRun", "adrain", "drain"]
