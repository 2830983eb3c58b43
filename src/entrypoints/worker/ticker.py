"""The worker pool's periodic ticks: declares the app's schedules in the store and enqueues each tick once.

:class:`Ticker` owns the thread ``tether-ticker``, off the lease and completion path:

- :meth:`~Ticker.declare_once` (at the pool's start, then once per heartbeat interval) records
  every schedule of the app (:meth:`~tether.ports.schedule_store.ScheduleStore.record_schedule`:
  definition, next tick, declared by this pool until a few heartbeats from now), and cancels the
  queued future tick of a schedule whose definition this starting pool changed, or that no live
  pool declares any more (removed from the code): such a schedule stops.
- :meth:`~Ticker.tick_once` (every :func:`pass_interval` seconds) asks
  :func:`~tether.domain.ticks.plan_tick` which tick of each schedule is due for enqueueing (at
  most one tick, at most 60 s ahead; the latest missed one within ``catch_up``) and enqueues it
  with :meth:`~tether.ports.schedule_store.ScheduleStore.enqueue_tick`, whose compare-and-set on
  the schedule's mark lets exactly one pool win each tick, with no leader.  A tick's job still
  queued once a later tick is due (enqueued ahead before every pool stopped) is cancelled first:
  only the latest missed tick runs.

Every pool of the app ticks; a process that only registers schedules (``app.periodic``) and
enqueues never does.  Store trouble is logged (rate-limited) and tried again at the next pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import attrs
from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import InvalidTransition, JobNotFound
from tether.domain.failure import describe_failure
from tether.domain.job import Job, JobStatus, NewJob
from tether.domain.schedules import Schedule, ScheduleState, is_tick_key
from tether.domain.ticks import plan_tick, superseded
from tether.domain.workers import GONE_AFTER_BEATS, GONE_FLOOR_SECONDS
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository
from tether.ports.schedule_store import ScheduleStore

logger = logging.getLogger("tether.worker")

#: Longest pause between two tick passes, in seconds (shorter for ``every`` below 4 s).
MAX_PASS_SECONDS = 1.0

#: Builds the job of ``schedule``'s tick at ``tick`` (aware UTC), given ``now``: the app's defaults
#: (queue, max_attempts) applied, due at the tick, keyed in Tether's namespace.
PrepareTick = Callable[[Schedule, datetime, datetime], NewJob]


def pass_interval(schedules: Mapping[str, Schedule]) -> float:
    """Seconds between tick passes: a quarter of the shortest ``every``, at most :data:`MAX_PASS_SECONDS`."""
    everies = [s.cadence.every_us / 1_000_000 for s in schedules.values() if s.cadence.every_us is not None]
    return min([MAX_PASS_SECONDS, *(e / 4 for e in everies)])


@attrs.frozen
class DeclarePass:
    """What one :meth:`Ticker.declare_once` did: the schedules declared, the tick jobs cancelled."""

    declared: tuple[str, ...] = ()
    cancelled: tuple[int, ...] = ()


class Ticker:
    """One pool's schedules: declared in the store, ticked exactly once across every pool.

    Args:
        store: the schedule store; None (a repository that keeps no schedules) makes every
            method a no-op.
        repository: reads and cancels tick jobs.
        dispatcher: told of each tick's job after it is committed.
        clock: supplies ``now``.
        schedules: the app's schedules by name (read at each pass, so later registrations count).
        prepare: builds a tick's job (see :data:`PrepareTick`).
        worker_id: recorded as ``declared_by``.
        heartbeat_interval: seconds between declarations; a declaration lapses after
            :data:`~tether.domain.workers.GONE_AFTER_BEATS` of them (at least
            :data:`~tether.domain.workers.GONE_FLOOR_SECONDS`).
        ratelog: the pool's rate-limited log.
    """

    def __init__(
        self,
        *,
        store: ScheduleStore | None,
        repository: JobRepository,
        dispatcher: Dispatcher,
        clock: Clock,
        schedules: Mapping[str, Schedule],
        prepare: PrepareTick,
        worker_id: str,
        heartbeat_interval: float,
        ratelog: RateLimitedLog,
    ) -> None:
        self._store = store
        self._repository = repository
        self._dispatcher = dispatcher
        self._clock = clock
        self._schedules = schedules
        self._prepare = prepare
        self._worker_id = worker_id
        self._heartbeat_interval = heartbeat_interval
        self._lapse = timedelta(seconds=max(GONE_AFTER_BEATS * heartbeat_interval, GONE_FLOOR_SECONDS))
        self._ratelog = ratelog
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._marks: dict[str, datetime | None] = {}  # name -> the mark last read or written
        self._redefined: set[str] = set()  # schedules whose definition this pool wrote once
        self.enqueued = 0  # ticks this pool enqueued

    @property
    def schedule_count(self) -> int:
        """How many schedules this pool ticks (0 without a schedule store)."""
        return 0 if self._store is None else len(self._schedules)

    # -- one pass each -----------------------------------------------------------------------
    def declare_once(self) -> DeclarePass:
        """Record every schedule, cancel the queued future ticks of undeclared ones, and, at the
        pool's first declaration, of the ones whose stored definition differs from this pool's
        (later declarations only refresh such a schedule's liveness: during a rolling deploy the
        definition of the pool started last stays, and nothing is cancelled back and forth).
        Never raises (store trouble is logged and tried again at the next declaration)."""
        if self._store is None:
            return DeclarePass()
        declared: list[str] = []
        doomed: list[int] = []
        try:
            now = self._clock.now()
            for schedule in list(self._schedules.values()):
                redefine = schedule.name not in self._redefined
                before = self._store.record_schedule(self._state(schedule, now), now=now, redefine=redefine)
                declared.append(schedule.name)
                self._redefined.add(schedule.name)
                if redefine and before is not None and before.fingerprint != schedule.fingerprint:
                    logger.info("schedule %s: its definition changed; its queued tick (if any) is cancelled", schedule.name)
                    self._marks.pop(schedule.name, None)
                    if before.last_job_id is not None:
                        doomed.append(before.last_job_id)
            for state in self._store.list_schedules(now=now):
                if state.name not in self._schedules and not state.live and state.last_job_status is JobStatus.QUEUED:
                    assert state.last_job_id is not None
                    doomed.append(state.last_job_id)
            cancelled = tuple(job_id for job_id in doomed if self._cancel_future_tick(job_id, now))
        except Exception as exc:  # noqa: BLE001 - retried at the next declaration
            self._failed("declare its schedules", exc)
            return DeclarePass(tuple(declared))
        for job_id in cancelled:
            logger.info("worker %s: cancelled the queued tick job %s of a changed or removed schedule", self._worker_id, job_id)
        return DeclarePass(tuple(declared), cancelled)

    def tick_once(self) -> list[Job]:
        """Enqueue each schedule's tick that is due for enqueueing now; returns the jobs this pool
        created.  Never raises."""
        if self._store is None or not self._schedules:
            return []
        created: list[Job] = []
        try:
            now = self._clock.now()
            schedules = list(self._schedules.values())
            marks = [self._marks.get(s.name) for s in schedules]
            states: dict[str, ScheduleState] = {}
            if any(mark is None or mark <= now for mark in marks):  # some schedule may have a tick to enqueue
                for state in self._store.list_schedules(now=now):
                    self._marks[state.name] = state.last_tick_at
                    states[state.name] = state
            for schedule in schedules:
                if schedule.name not in self._marks:
                    continue  # not declared yet (registered after the last declaration)
                state = states.get(schedule.name)
                if state is not None and state.last_job_status is JobStatus.QUEUED:
                    self._cancel_superseded(schedule, state, now)
                tick = plan_tick(schedule.cadence, last_tick=self._marks[schedule.name], now=now, catch_up=schedule.catch_up)
                if tick is None:
                    continue
                result = self._store.enqueue_tick(
                    schedule.name, self._prepare(schedule, tick, now), now=now, overlap=schedule.overlap
                )
                if result is None:
                    self._marks[schedule.name] = None  # moved by another pool, or held back: read again
                    continue
                self._marks[schedule.name] = tick
                if result.created:
                    created.append(result.job)
        except Exception as exc:  # noqa: BLE001 - retried at the next pass
            self._failed("enqueue a periodic tick", exc)
        if created:
            self.enqueued += len(created)
            try:
                self._dispatcher.notify(created)
            except Exception:
                logger.exception("dispatcher notify failed for %d periodic tick job(s)", len(created))
            for job in created:
                logger.debug("schedule tick: job %s (%s) due at %s", job.id, job.job_type, job.scheduled_at.isoformat())
        return created

    def waiting_ticks(
        self, *, queues: list[str] | None, job_types: list[str], paused: frozenset[str] | set[str] = frozenset()
    ) -> int:
        """How many queued tick jobs not due yet are the last jobs of stored schedules, of these
        queues (None: any) but not of the ``paused`` ones, and of these job types: work that an
        idle check must not wait for."""
        if self._store is None:
            return 0
        now = self._clock.now()
        waiting = 0
        for state in self._store.list_schedules(now=now):
            if state.last_job_status is not JobStatus.QUEUED or state.last_job_id is None:
                continue
            try:
                job = self._repository.get(state.last_job_id)
            except JobNotFound:
                continue
            if (
                job.status is JobStatus.QUEUED and job.scheduled_at > now and is_tick_key(job.idempotency_key)
                and (queues is None or job.queue in queues) and job.queue not in paused and job.job_type in job_types
            ):
                waiting += 1
        return waiting

    # -- thread ------------------------------------------------------------------------------
    def start(self) -> None:
        """Declare the schedules now, then tick and re-declare on the thread ``tether-ticker``."""
        if self._store is None:
            return
        self.declare_once()
        self._thread = threading.Thread(target=self._run, name="tether-ticker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop ticking (no tick is enqueued after this returns, unless the thread is stuck in the store)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        next_declare = self._heartbeat_interval
        elapsed = 0.0
        while not self._stop.is_set():
            self.tick_once()
            interval = pass_interval(self._schedules)
            if self._stop.wait(interval):
                return
            elapsed += interval
            if elapsed >= next_declare:
                elapsed = 0.0
                self.declare_once()

    # -- the declaration and the cancel of a tick ---------------------------------------------
    def _state(self, schedule: Schedule, now: datetime) -> ScheduleState:
        mark = self._marks.get(schedule.name)
        upcoming = mark if mark is not None and mark > now else schedule.cadence.next_after(now)
        return ScheduleState(
            name=schedule.name,
            job_type=schedule.job_type,
            queue=schedule.queue,
            spec=schedule.cadence.spec,
            tz=schedule.cadence.tz,
            fingerprint=schedule.fingerprint,
            next_tick_at=upcoming,
            declared_by=self._worker_id,
            declared_at=now,
            declared_until=now + self._lapse,
        )

    def _cancel_superseded(self, schedule: Schedule, state: ScheduleState, now: datetime) -> None:
        """Cancel the schedule's last tick job if it is still queued while a later tick is due
        (:func:`~tether.domain.ticks.superseded`): an older missed tick, which never runs beside
        the latest one (after a downtime, the tick a pool had enqueued ahead before it stopped)."""
        tick, job_id = state.last_tick_at, state.last_job_id
        if tick is None or job_id is None or not superseded(schedule.cadence, tick=tick, now=now):
            return
        try:
            job = self._repository.get(job_id)
            if job.status is not JobStatus.QUEUED or not is_tick_key(job.idempotency_key):
                return
            self._repository.cancel(job_id, now=now)
        except (JobNotFound, InvalidTransition):  # purged, or it started meanwhile
            return
        logger.info("schedule %s: cancelled the queued job %s of its %s tick, an older missed tick than one now due",
                    schedule.name, job_id, tick.isoformat())

    def _cancel_future_tick(self, job_id: int, now: datetime) -> bool:
        try:
            job = self._repository.get(job_id)
            if job.status is not JobStatus.QUEUED or job.scheduled_at <= now or not is_tick_key(job.idempotency_key):
                return False
            self._repository.cancel(job_id, now=now)
        except (JobNotFound, InvalidTransition):  # purged, or it started meanwhile
            return False
        return True

    def _failed(self, what: str, exc: BaseException) -> None:
        self._ratelog(
            "ticker", logging.WARNING, "worker %s: could not %s (%s); tried again at the next pass",
            self._worker_id, what, describe_failure(exc, 300),
        )


__all__ = ["MAX_PASS_SECONDS", "DeclarePass", "PrepareTick", "Ticker", "pass_interval"]
