"""The worker pool: :class:`WorkerPool` builds its parts, starts them, and stops them in order.

The parts and how a job passes between them are described in :mod:`tether.entrypoints.worker`.
The pool itself holds no job: it validates its settings, wires the parts together, and runs the
shutdown sequence (stop leasing, release what was prefetched, drain, release what is left, stop
the threads) with the help of :class:`~tether.entrypoints.worker.shutdown.Shutdown`.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Self

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import ValidationError, shown
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.schedules import Schedule
from tether.domain.validation import validate_int, validate_queue, validate_seconds, validate_worker_id
from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.job_logs import install_filter
from tether.entrypoints.maintenance import MaintenanceLoop, Reaper
from tether.entrypoints.settings import DEFAULT_LEASE_TIMEOUT, DEFAULT_REAP_INTERVAL, HEARTBEATS_PER_LEASE
from tether.entrypoints.worker.acquirer import Acquirer
from tether.entrypoints.worker.async_runner import AsyncRunner
from tether.entrypoints.worker.completions import CompletionBatcher
from tether.entrypoints.worker.heartbeats import Heartbeats
from tether.entrypoints.worker.held import HeldJobs, HeldJobsByKind
from tether.entrypoints.worker.observers import JobObserver, combine
from tether.entrypoints.worker.outcomes import Outcomes
from tether.entrypoints.worker.presence import Presence
from tether.entrypoints.worker.queue_limits import QueueLimits
from tether.entrypoints.worker.routing import RunnerByKind
from tether.entrypoints.worker.runner import Runner, ThreadRunner
from tether.entrypoints.worker.shutdown import Shutdown
from tether.entrypoints.worker.stats import Counts, WorkerStats
from tether.entrypoints.worker.supervision import Supervisor, survivable
from tether.entrypoints.worker.ticker import PrepareTick, Ticker
from tether.entrypoints.worker.timeouts import Timeouts
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository
from tether.ports.schedule_store import ScheduleStore
from tether.ports.worker_registry import WorkerRegistry

logger = logging.getLogger("tether.worker")

#: How often :meth:`WorkerPool.run` checks for a stop request or idleness, in seconds.
RUN_POLL_SECONDS = 0.1


def default_worker_id() -> str:
    """``"<hostname>-<pid>-<6 hex>"``: the random suffix is new at every start, so a restarted
    worker never shares an id with its previous run (case C03; the id is still no fence)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class WorkerPool:
    """Runs handlers for leased jobs on ``concurrency`` threads.  Build it with :meth:`Tether.worker`.

    Args:
        repository, dispatcher, clock: the ports.
        handlers: job type -> :class:`HandlerSpec` (read at each job, so later registrations count).
        retry_policy: backoff of failed attempts.
        concurrency: handler threads (1-1024).
        queues: queue names to take jobs from, or None for all queues.
        lease_timeout: seconds a lease lasts without a heartbeat (> 0; default 60: a job of a
            worker that died runs again within about ``lease_timeout + reap_interval``).
        heartbeat_interval: seconds between heartbeats (> 0, < lease_timeout); default
            ``lease_timeout / 6`` (:data:`~tether.entrypoints.settings.HEARTBEATS_PER_LEASE`).
        reap_interval: seconds between reaper passes (> 0).
        drain_timeout: seconds in-flight jobs get to finish at shutdown (>= 0).
        worker_id: 1-200 printable characters; default :func:`default_worker_id`.
        max_wait: longest single wait for work in the dispatcher, in seconds (>= 0).
        prefetch: most jobs leased ahead of the free threads (0-1024; default ``concurrency``);
            fewer while handlers are slow (see
            :data:`~tether.entrypoints.worker.acquirer.PREFETCH_HORIZON`).  A prefetched job is
            heartbeated like a running one, and released unstarted at shutdown.  A pool with
            ``async def`` handlers too leases none ahead: it leases each kind for that kind's free
            slots, with that kind's job types (see :mod:`.acquirer`), when its dispatcher can.
        registry: where the pool records itself while it runs (see :mod:`.presence`): at start,
            at every heartbeat, removed at a clean stop; None records nothing.
        job_timeout: seconds a handler registered without a ``timeout`` may run (a finite number
            > 0), or None for no limit.  Past it the job's context is cancelled, a new thread
            takes the slot, and the attempt fails with :class:`~tether.domain.errors.JobTimeout`
            (see :mod:`tether.entrypoints.worker.timeouts`).
        schedules: periodic schedules by name that this pool declares and ticks (see
            :mod:`.ticker`), read at each pass; None: none.
        schedule_store: where schedules are declared and ticks' marks kept; None: no ticking
            (and no cancelling of removed schedules' ticks).
        prepare_tick: builds a tick's job (required with ``schedule_store``).
        observers: told about each job and the pool's start (metrics, traces, job logs; see
            :mod:`tether.entrypoints.worker.observers`); None or empty: no observer call at all.
        async_concurrency: ``async def`` handlers run at once on the pool's event loop (1-100,000;
            default 100), beside the threads (see :mod:`.async_runner`).  The loop is started
            only when a handler registered before the pool was built is ``async def``; later
            async registrations run on the threads, each on an event loop of its own.

    Raises:
        ValidationError: naming the bad argument.
    """

    def __init__(
        self,
        *,
        repository: JobRepository,
        dispatcher: Dispatcher,
        clock: Clock,
        handlers: Mapping[str, HandlerSpec],
        retry_policy: RetryPolicy | None = None,
        concurrency: int = 4,
        queues: Sequence[str] | None = None,
        lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
        heartbeat_interval: float | None = None,
        reap_interval: float = DEFAULT_REAP_INTERVAL,
        drain_timeout: float = 30.0,
        worker_id: str | None = None,
        max_wait: float = 1.0,
        prefetch: int | None = None,
        registry: WorkerRegistry | None = None,
        job_timeout: float | None = None,
        schedules: Mapping[str, Schedule] | None = None,
        schedule_store: ScheduleStore | None = None,
        prepare_tick: PrepareTick | None = None,
        observers: Sequence[JobObserver] | None = None,
        async_concurrency: int = 100,
    ) -> None:
        self.repository = repository
        self.dispatcher = dispatcher
        self.clock = clock
        self.handlers = handlers
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy()
        self.concurrency = validate_int(concurrency, "concurrency", 1, 1024)
        if queues is not None:
            if isinstance(queues, str) or not isinstance(queues, Sequence) or not queues:
                raise ValidationError("queues", f"must be a non-empty list of queue names or None, got {shown(queues)}")
            queues = list(dict.fromkeys(validate_queue(q, f"queues[{i}]") for i, q in enumerate(queues)))
        self.queues: list[str] | None = queues
        self.lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        if heartbeat_interval is None:
            heartbeat_interval = self.lease_timeout / HEARTBEATS_PER_LEASE
        self.heartbeat_interval = validate_seconds(heartbeat_interval, "heartbeat_interval", allow_zero=False)
        if self.heartbeat_interval >= self.lease_timeout:
            raise ValidationError(
                "heartbeat_interval", f"must be shorter than lease_timeout ({self.lease_timeout} s), got {self.heartbeat_interval}"
            )
        self.reap_interval = validate_seconds(reap_interval, "reap_interval", allow_zero=False)
        self.drain_timeout = validate_seconds(drain_timeout, "drain_timeout")
        self.max_wait = validate_seconds(max_wait, "max_wait")
        self.worker_id = validate_worker_id(worker_id) if worker_id is not None else default_worker_id()
        self.prefetch = self.concurrency if prefetch is None else validate_int(prefetch, "prefetch", 0, 1024)
        self.job_timeout = None if job_timeout is None else validate_seconds(job_timeout, "job_timeout", allow_zero=False)
        self.async_concurrency = validate_int(async_concurrency, "async_concurrency", 1, 100_000)

        install_filter()  # its log records about a job carry the job's fields (see tether.entrypoints.job_logs)
        self._observer = observer = combine(observers)
        #: why the pool stopped on its own (a thread that could not be started again), or None
        self.failure: str | None = None
        self._started = False
        self._stopped = False
        self._stop_lock = threading.Lock()
        self._ratelog = ratelog = RateLimitedLog(logger)
        has_async = any(spec.is_async for spec in list(handlers.values()))
        self._held = held = HeldJobsByKind() if has_async else HeldJobs()
        self._counts = counts = Counts(held.lock)
        self._supervisor = supervisor = Supervisor(self.worker_id, give_up=self._give_up)
        spawn = supervisor.thread
        self._completions = completions = CompletionBatcher(repository, clock, name="tether-complete", spawn=spawn)
        self._queue_limits = queue_limits = QueueLimits(
            repository=repository, dispatcher=dispatcher, clock=clock, queues=self.queues, ratelog=ratelog
        )
        outcomes = Outcomes(
            held=held, counts=counts, completions=completions, dispatcher=dispatcher, clock=clock,
            worker_id=self.worker_id, ratelog=ratelog, observer=observer, queue_limits=queue_limits,
        )
        self._timeouts = timeouts = Timeouts(
            held=held, counts=counts, outcomes=outcomes, handlers=handlers, repository=repository, clock=clock,
            retry_policy=self.retry_policy, worker_id=self.worker_id, spawn=spawn,
        )
        self._runner = runner = ThreadRunner(
            held=held, outcomes=outcomes, completions=completions, handlers=handlers, repository=repository,
            clock=clock, retry_policy=self.retry_policy, concurrency=self.concurrency, worker_id=self.worker_id,
            timeouts=timeouts, job_timeout=self.job_timeout, observer=observer,
        )
        timeouts.slots = runner
        self._async_runner: AsyncRunner | None = None
        pool_runner: Runner = runner
        if isinstance(held, HeldJobsByKind):  # an async def handler is registered
            self._async_runner = AsyncRunner(
                held=held, outcomes=outcomes, completions=completions, handlers=handlers, repository=repository,
                clock=clock, retry_policy=self.retry_policy, concurrency=self.async_concurrency,
                worker_id=self.worker_id, counts=counts, job_timeout=self.job_timeout, ratelog=ratelog,
                observer=observer,
            )
            pool_runner = RunnerByKind(runner, self._async_runner, handlers, held)
        self._shutdown = shutdown = Shutdown(
            held=held, counts=counts, runner=pool_runner, repository=repository, dispatcher=dispatcher, clock=clock,
            worker_id=self.worker_id, ratelog=ratelog, timeouts=timeouts,
        )
        self._acquirer = acquirer = Acquirer(
            held=held, runner=pool_runner, completions=completions, repository=repository, dispatcher=dispatcher,
            clock=clock, queues=self.queues, worker_id=self.worker_id, lease_timeout=self.lease_timeout,
            max_wait=self.max_wait, prefetch=self.prefetch, ratelog=ratelog,
            release_unstarted=shutdown.release_unstarted, spawn=spawn, queue_limits=queue_limits,
        )
        # The acquirer waits for room: it is told whenever a job leaves a slot or the book, and,
        # with a dispatcher that leases from the repository, each completion flush leases for it.
        held.wake = acquirer.wake
        refill = acquirer.refill(handlers_busy=pool_runner.busy)
        if refill is not None:
            completions.refill_with(refill)
        self._presence = Presence(
            registry=registry, clock=clock, worker_id=self.worker_id, queues=self.queues, handlers=handlers,
            concurrency=self.concurrency, heartbeat_interval=self.heartbeat_interval, dispatcher=dispatcher,
            ratelog=ratelog,
        )
        self._heartbeats = Heartbeats(
            held=held, counts=counts, repository=repository, clock=clock, interval=self.heartbeat_interval,
            lease_timeout=self.lease_timeout, worker_id=self.worker_id, ratelog=ratelog,
            on_beat=self._after_beat, spawn=spawn,
        )
        if schedule_store is not None and prepare_tick is None:
            raise ValidationError("prepare_tick", "is required with a schedule_store")
        self._ticker = Ticker(
            store=schedule_store if prepare_tick is not None else None, repository=repository, dispatcher=dispatcher,
            clock=clock, schedules=schedules if schedules is not None else {}, prepare=prepare_tick or _no_tick,
            worker_id=self.worker_id, heartbeat_interval=self.heartbeat_interval, ratelog=ratelog,
        )
        self._maintenance = MaintenanceLoop(
            Reaper(repository, clock, dispatcher), dispatcher, reap_interval=self.reap_interval, spawn=spawn
        )

    # -- public ------------------------------------------------------------------------------
    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the counts so far (see :class:`WorkerStats`)."""
        return self._counts.snapshot(reaped=self._maintenance.reaped)

    @property
    def runs_async(self) -> bool:
        """True when the pool runs ``async def`` handlers on its event loop (up to
        ``async_concurrency`` at once) beside its ``concurrency`` threads."""
        return self._async_runner is not None

    @property
    def in_flight(self) -> int:
        """Jobs leased by this pool and not finished yet."""
        with self._held.lock:
            return self._held.in_flight

    @property
    def stopping(self) -> bool:
        """True once shutdown began (no more leases)."""
        return self._held.stopping.is_set()

    def start(self) -> None:
        """Start the threads and return at once.

        Raises:
            RuntimeError: the pool was started before (a pool runs once).
        """
        with self._stop_lock:
            if self._started:
                raise RuntimeError("this WorkerPool was already started; build a new one with app.worker()")
            self._started = True
        logger.info(
            "worker %s starting: %d thread(s)%s, queues %s, lease %.1f s, heartbeat %.1f s, reap every %.1f s, "
            "job timeout %s, %d periodic schedule(s)",
            self.worker_id, self.concurrency,
            f" and up to {self.async_concurrency} async handler(s) on an event loop" if self._async_runner else "",
            self.queues or "all", self.lease_timeout,
            self.heartbeat_interval, self.reap_interval,
            "none" if self.job_timeout is None else f"{self.job_timeout:g} s", self._ticker.schedule_count,
        )
        if self._observer is not None:
            self._observer.pool_started(self)
        self._presence.announce()
        self._completions.start()
        self._runner.start()
        if self._async_runner is not None:
            self._async_runner.start()
        self._heartbeats.start()
        self._acquirer.start()
        self._maintenance.start()
        self._ticker.start()

    def stop(self, drain_timeout: float | None = None) -> WorkerStats:
        """Shut down: stop leasing now, give in-flight jobs ``drain_timeout`` seconds (default: the
        pool's), then cancel and release the rest under the fence.  Idempotent; returns the stats.

        Handler threads still busy after their job was released are daemon threads: they do not
        keep the process alive.

        Raises:
            ValidationError: ``drain_timeout`` is not a finite number of seconds >= 0.
        """
        drain = self.drain_timeout if drain_timeout is None else validate_seconds(drain_timeout, "drain_timeout")
        with self._stop_lock:
            if self._stopped or not self._started:
                self._stopped = True
                self._held.stopping.set()
                return self.stats
            self._stopped = True
        first_signals = self._shutdown.begin()
        self._ticker.stop()
        self._acquirer.interrupt()  # it may be waiting for room, or in the dispatcher for work
        logger.info("worker %s stopping: no new leases; draining %d job(s) for up to %.1f s", self.worker_id, self.in_flight, drain)
        deadline = time.monotonic() + drain
        self._acquirer.join(timeout=max(self.max_wait, 1.0) + 5.0)
        self._shutdown.release_prefetched()
        self._shutdown.drain(deadline=deadline, drain_timeout=drain, first_signals=first_signals)
        self._runner.stop()
        if self._async_runner is not None:
            self._async_runner.stop()
        self._timeouts.stop()
        self._heartbeats.stop()
        self._maintenance.stop()
        # Handler threads whose job was released may still be inside a handler that ignores
        # cancellation; they are daemon threads, so wait only briefly.
        self._runner.join(deadline=time.monotonic() + 1.0)
        if self._async_runner is not None:
            self._async_runner.join(deadline=time.monotonic() + 1.0)
        self._heartbeats.join(5.0)
        self._presence.withdraw()
        self._timeouts.join(5.0)
        self._completions.close()
        stats = self.stats
        logger.info("worker %s stopped: %s", self.worker_id, stats)
        return stats

    def request_stop(self) -> None:
        """Ask :meth:`run` to shut down, from any thread (SIGINT/SIGTERM do the same).
        A second request during the drain ends the drain at once."""
        self._shutdown.request_stop()

    def run(self, stop_when_idle: bool = False, install_signal_handlers: bool = True) -> WorkerStats:
        """Start, block until asked to stop, then shut down as :meth:`stop` does.

        Args:
            stop_when_idle: also stop once nothing is left that this pool can run: no job of its
                queues and of a type it has a handler for is ``queued``, ``retrying`` (due or
                not) or ``running`` (checked with ``count_by_status``).  Jobs of types it has no
                handler for do not keep it waiting, nor do periodic ticks not due yet.
            install_signal_handlers: handle SIGINT/SIGTERM as a stop request (only when called on
                the main thread; the previous handlers are restored on return).

        Returns:
            the final :class:`WorkerStats`.
        """
        shutdown = self._shutdown
        previous: dict[signal.Signals, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, shutdown.on_signal)
        try:
            self.start()
            while not shutdown.stop_requested.is_set() and not shutdown.signals:
                time.sleep(RUN_POLL_SECONDS)
                self._supervisor.check_once()
                if stop_when_idle and self._idle():
                    logger.info("worker %s: no job left in its queues that it can run; stopping", self.worker_id)
                    break
            if shutdown.signals:
                logger.info(
                    "worker %s: stop requested by %s (a second one abandons the drain)", self.worker_id, shutdown.signal_name()
                )
            return self.stop()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]

    def __enter__(self) -> Self:
        """``with app.worker(...) as pool:`` starts the pool, and stops it (with its drain) on exit."""
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _after_beat(self) -> None:
        """On the heartbeat thread after each pass: refresh the registry entry, look at the threads."""
        self._presence.refresh_once()
        self._supervisor.check_once()

    def _give_up(self, message: str) -> None:
        """A thread of the pool is dead for good: stop (``message`` was logged)."""
        self.failure = message
        self._shutdown.request_stop()

    def _idle(self) -> bool:
        if self.in_flight:  # cheap check first: counting jobs can cost a scan of the store
            return False
        try:
            queues: Sequence[str | None] = self.queues if self.queues is not None else [None]
            job_types = list(self.handlers)  # read now: later registrations count
            queued = 0
            paused = self._queue_limits.paused_names()  # jobs waiting there are not runnable
            for name in queues:
                if paused and name is None:
                    per_queue = getattr(self.repository, "count_by_queue", None)
                    if per_queue is not None:
                        for queue, counts in per_queue(job_types=job_types).items():
                            if counts[JobStatus.RUNNING] or (queue not in paused and counts[JobStatus.RETRYING]):
                                return False
                            queued += 0 if queue in paused else counts[JobStatus.QUEUED]
                        continue
                counts = self.repository.count_by_status(queue=name, job_types=job_types)
                if counts[JobStatus.RUNNING] or (name not in paused and counts[JobStatus.RETRYING]):
                    return False
                queued += 0 if name in paused else counts[JobStatus.QUEUED]
            # a periodic tick's job enqueued ahead, not due yet, is no work to wait for
            if queued and queued > self._ticker.waiting_ticks(queues=self.queues, job_types=job_types, paused=paused):
                return False
        except BaseException as exc:
            if not survivable(exc):
                raise
            self._ratelog("idle", logging.WARNING, "worker %s: could not count jobs", self.worker_id, exc_info=True)
            return False
        return self.in_flight == 0


def _no_tick(schedule: Schedule, tick: object, now: object) -> object:  # pragma: no cover - never called
    raise AssertionError("a pool without a schedule store enqueues no tick")


__all__ = ["RUN_POLL_SECONDS", "WorkerPool", "default_worker_id"]
