"""The worker pool: N handler threads fed by one acquiring loop, plus heartbeats and the reaper.

Threads of one :class:`WorkerPool`:

- ``tether-acquire``: asks the dispatcher for as many jobs as there are free handler threads plus
  the prefetch room (``acquire(limit=free, ...)``) and hands each to a handler thread; jobs beyond
  the free threads wait in the pool's inbox, heartbeated like running ones.  The prefetch room is
  at most ``prefetch`` and at most what the threads would start within ``PREFETCH_HORIZON``
  seconds at the recent mean handler time (none before the first handler returned), so slow jobs
  are not leased ahead.  When the dispatcher leases straight from the repository
  (``Dispatcher.leases_from``), the completion flush leases for the free threads too
  (``complete_and_lease``: one round trip), and this loop waits while such a flush is pending or
  on the wire; it leases itself when the pool is starting or idle.  A thread is free once its
  handler returned, even while that job's completion is still being written by the batcher (the
  job stays in :attr:`WorkerPool.in_flight`, heartbeated, until its write returned), so leasing
  overlaps with writing; jobs in flight are capped at twice ``concurrency``.  Once one thread is
  free the acquirer waits up to ``LEASE_COALESCE_SECONDS`` for half of them to be, so one lease
  query refills many threads.  Storage trouble
  (``StorageUnavailable`` or any other error from the dispatcher) is logged at most about once a
  second and retried with a bounded exponential backoff (0.05 s doubling to 5 s).
- ``tether-worker-<i>`` (``concurrency`` of them): run one job at a time.  Every outcome is one
  fenced write: ``complete`` (handed to the completion batcher, below); ``fail with a backoff from the retry policy (``retrying``) or
  ``dead`` when attempts are used up or the handler raised
  :class:`~tether.domain.errors.PermanentError`; ``dead`` at once for a job type with no handler.
  Any exception (even one that cannot be printed, case C18) becomes a bounded ``last_error``
  through :func:`~tether.domain.failure.describe_failure`.  A ``LeaseLost`` answer is logged and
  counted, never raised: the job belongs to someone else now.  Failure hooks run after the
  failure is persisted; their errors are logged and swallowed (case C17).
- ``tether-complete``: the completion batcher (:mod:`tether.entrypoints.worker.completions`).  The success
  of every job whose handler returned is queued there, and this thread writes all those waiting
  at that moment in one ``complete_many`` call (one round trip on PostgreSQL); each item is still
  its own compare-and-set on (id, running, token), and each job's own outcome (completed, or
  ``LeaseLost`` logged and counted for that job) is recorded only after the write returned; only
  then does the job stop counting as in flight.  ``StorageUnavailable`` is retried with backoff
  for at most ``WRITE_RETRY_SECONDS`` and never past the job's lease expiry.  Failures
  (retrying/dead) are written one by one by the handler thread.
- ``tether-heartbeat``: every ``heartbeat_interval`` seconds extends every held lease to
  ``now + lease_timeout``, including the leases of jobs whose outcome is being written (waiting
  in a batch, or retried after a storage error).  A refused heartbeat cancels that job's context
  (for a job whose outcome is being written it changes nothing: that write reports its own
  result).
- ``tether-maintenance``: the reaper every ``reap_interval`` seconds, and the dispatcher's upkeep.

Shutdown (:meth:`WorkerPool.stop`, or SIGINT/SIGTERM under :meth:`WorkerPool.run`): no lease is
taken after the request (jobs a lease query returned at that very moment, and jobs prefetched but
not started yet, are released unstarted at once);
in-flight jobs get ``drain_timeout`` seconds to finish; past that their contexts are cancelled and
their jobs released under the fence (``queued``, due now, lease cleared, the attempt given back)
so another worker can lease them at once (case C16).  Whatever a released handler does afterwards
is not recorded.  A second signal ends the drain at once (one that came before the drain began
too), as does a second :meth:`WorkerPool.request_stop`; the release lines then say so
(``second SIGTERM: drain abandoned``) instead of ``drain deadline passed``.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import random
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any, Self, TypeVar

import attrs
from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import LeaseLost, StorageUnavailable, ValidationError
from tether.domain.failure import describe_failure
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.validation import validate_int, validate_queue, validate_seconds, validate_worker_id
from tether.entrypoints.worker.completions import CompletionBatcher, Refill
from tether.entrypoints.context import JobContext
from tether.entrypoints.execution import Outcome, execute_job
from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.maintenance import MaintenanceLoop, Reaper
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")

_T = TypeVar("_T")

#: Backoff after a failed lease query, in seconds: doubles from the first to the second value.
ACQUIRE_BACKOFF = (0.05, 5.0)
#: How long the pool keeps retrying a complete/fail write that hit ``StorageUnavailable``, in
#: seconds, at most (never past the lease expiry: after that the reaper owns the job).
WRITE_RETRY_SECONDS = 30.0
#: Longest wait, in seconds, for half the handler threads to be free before a lease query asks for
#: fewer jobs (see ``_acquire_loop``); the query then asks for exactly the free threads anyway.
LEASE_COALESCE_SECONDS = 0.002
#: Prefetch horizon, in seconds: beyond its free threads a pool leases at most as many jobs as its
#: threads are expected to start within this time at the recent mean handler time (and at most
#: ``prefetch``), so a pool running long jobs leases none ahead of its threads.
PREFETCH_HORIZON = 0.05
#: Weight of the newest handler time in that running mean (an exponential moving average).
PREFETCH_EMA_WEIGHT = 0.1
#: How often :meth:`WorkerPool.run` checks for a stop request or idleness, in seconds.
RUN_POLL_SECONDS = 0.1


def default_worker_id() -> str:
    """``"<hostname>-<pid>-<6 hex>"``: the random suffix is new at every start, so a restarted
    worker never shares an id with its previous run (case C03; the id is still no fence)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@attrs.frozen
class WorkerStats:
    """What a pool did so far (counts of jobs).

    Attributes:
        completed: jobs completed.
        failed: failed attempts sent to ``retrying``.
        dead: jobs sent to ``dead`` (attempts used up, PermanentError, unknown job type).
        lease_lost: writes refused by the fence (complete, fail, heartbeat, release).
        released: jobs handed back at shutdown.
        reaped: expired leases taken back by this pool's reaper (any worker's).
    """

    completed: int = 0
    failed: int = 0
    dead: int = 0
    lease_lost: int = 0
    released: int = 0
    reaped: int = 0


class _Running:
    """A job held by a handler thread."""

    def __init__(self, job: Job, ctx: JobContext) -> None:
        self.job = job
        self.ctx = ctx
        self.token: str = ctx.token
        self.lock = threading.Lock()
        self.finishing = False  # the handler returned; its outcome is being written
        self.released = False  # handed back at shutdown; nothing more is written for it
        self.lost_counted = False  # a LeaseLost for this lease is in the stats already
        self.deferred = False  # its completion is with the batcher, which finishes the entry


class _PoolWriter:
    """The pool's :class:`~tether.entrypoints.execution.OutcomeWriter` for one running job."""

    def __init__(self, pool: WorkerPool, entry: _Running) -> None:
        self._pool = pool
        self._entry = entry

    def begin_finish(self) -> bool:
        return self._pool._begin_finish(self._entry)

    def write(self, what: str, write: Callable[[], Job]) -> Job | None:
        if what == "complete" and self._pool._defer_complete(self._entry):
            # The same fenced completion, handed to the batcher: the job stays in flight (and
            # heartbeated) until its write returned; the pool records the outcome then.
            return self._entry.job
        return self._pool._write(self._entry, what, write)


#: Which :class:`WorkerStats` counter each recorded outcome bumps.
_COUNTERS = {Outcome.COMPLETED: "completed", Outcome.RETRYING: "failed", Outcome.DEAD: "dead"}


class WorkerPool:
    """Runs handlers for leased jobs on ``concurrency`` threads.  Build it with :meth:`Tether.worker`.

    Args:
        repository, dispatcher, clock: the ports.
        handlers: job type -> :class:`HandlerSpec` (read at each job, so later registrations count).
        retry_policy: backoff of failed attempts.
        concurrency: handler threads (1-1024).
        queues: queue names to take jobs from, or None for all queues.
        lease_timeout: seconds a lease lasts without a heartbeat (> 0).
        heartbeat_interval: seconds between heartbeats (> 0, < lease_timeout); default
            ``lease_timeout / 3``.
        reap_interval: seconds between reaper passes (> 0).
        drain_timeout: seconds in-flight jobs get to finish at shutdown (>= 0).
        worker_id: 1-200 printable characters; default :func:`default_worker_id`.
        max_wait: longest single wait for work in the dispatcher, in seconds (>= 0).
        prefetch: most jobs leased ahead of the free threads (0-1024; default ``concurrency``);
            fewer while handlers are slow (see :data:`PREFETCH_HORIZON`).  A prefetched job is
            heartbeated like a running one, and released unstarted at shutdown.

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
        lease_timeout: float = 900.0,
        heartbeat_interval: float | None = None,
        reap_interval: float = 30.0,
        drain_timeout: float = 30.0,
        worker_id: str | None = None,
        max_wait: float = 1.0,
        prefetch: int | None = None,
    ) -> None:
        self.repository = repository
        self.dispatcher = dispatcher
        self.clock = clock
        self.handlers = handlers
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy()
        self.concurrency = validate_int(concurrency, "concurrency", 1, 1024)
        if queues is not None:
            if isinstance(queues, str) or not isinstance(queues, Sequence) or not queues:
                raise ValidationError("queues", f"must be a non-empty list of queue names or None, got {queues!r}")
            queues = list(dict.fromkeys(validate_queue(q, f"queues[{i}]") for i, q in enumerate(queues)))
        self.queues: list[str] | None = queues
        self.lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        if heartbeat_interval is None:
            heartbeat_interval = self.lease_timeout / 3
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

        self._lock = threading.Condition()
        self._running: dict[int, _Running] = {}
        self._busy = 0  # jobs leased and not finished yet (handed to a thread, or completion being written)
        self._active = 0  # jobs handed to the threads whose handler has not returned (running or prefetched)
        self._reserved = 0  # jobs a lease query on the wire may return (acquirer or completion flush)
        self._handler_seconds: float | None = None  # running mean of handler times (prefetch)
        self._lease_batch = max(1, self.concurrency // 2)  # free threads worth a lease query at once
        self._stats: dict[str, int] = dict.fromkeys(attrs.fields_dict(WorkerStats), 0)
        self._stopping = threading.Event()  # no more leases
        self._stop_requested = threading.Event()  # run(): a signal or stop() asked to stop
        self._cut_drain = threading.Event()  # end the drain now (a second request)
        # Signals only bump this counter: a handler runs on the main thread between bytecodes and
        # must not take a lock (an Event's included) that the main thread may be holding.
        self._signals = 0
        self._last_signal = 0  # its number, for the log
        self._inbox: queue_module.SimpleQueue[_Running | None] = queue_module.SimpleQueue()
        self._heartbeat_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._stopped = False
        self._stop_lock = threading.Lock()
        self._ratelog = RateLimitedLog(logger)
        refill = None
        leases_from = getattr(dispatcher, "leases_from", None)  # a third-party dispatcher may lack it
        if leases_from is not None and leases_from(repository):
            refill = Refill(
                queues=self.queues, worker_id=self.worker_id, lease_timeout=self.lease_timeout,
                reserve=self._reserve_refill, deliver=self._deliver_refill, idle=self._refill_idle,
                handlers_busy=lambda: self._active > 0,
            )
        self._completions = CompletionBatcher(repository, clock, name="tether-complete", refill=refill)
        self._maintenance = MaintenanceLoop(
            Reaper(repository, clock, dispatcher), dispatcher, reap_interval=self.reap_interval
        )

    # -- public ------------------------------------------------------------------------------
    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the counts so far (see :class:`WorkerStats`)."""
        with self._lock:
            counts = dict(self._stats)
        counts["reaped"] = self._maintenance.reaped
        return WorkerStats(**counts)

    @property
    def in_flight(self) -> int:
        """Jobs leased by this pool and not finished yet."""
        with self._lock:
            return self._busy

    @property
    def stopping(self) -> bool:
        """True once shutdown began (no more leases)."""
        return self._stopping.is_set()

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
            "worker %s starting: %d thread(s), queues %s, lease %.1f s, heartbeat %.1f s, reap every %.1f s",
            self.worker_id, self.concurrency, self.queues or "all", self.lease_timeout,
            self.heartbeat_interval, self.reap_interval,
        )
        self._completions.start()
        for i in range(self.concurrency):
            self._spawn(self._handler_loop, f"tether-worker-{i}")
        self._spawn(self._heartbeat_loop, "tether-heartbeat")
        self._spawn(self._acquire_loop, "tether-acquire")
        self._maintenance.start()

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
                self._stopping.set()
                return self.stats
            self._stopped = True
        self._stopping.set()
        self._stop_requested.set()
        # The first signal is the stop request itself; every one after it cuts the drain, even one
        # that came in before this line (two quick SIGTERMs must not wait out the deadline).
        first_signals = min(self._signals, 1)
        with self._lock:
            self._lock.notify_all()  # the acquirer may be waiting for a free thread
        self.dispatcher.wake()
        logger.info("worker %s stopping: no new leases; draining %d job(s) for up to %.1f s", self.worker_id, self.in_flight, drain)
        deadline = time.monotonic() + drain
        self._join("tether-acquire", timeout=max(self.max_wait, 1.0) + 5.0)
        self._release_prefetched()
        with self._lock:
            while self._busy and self._drain_cut_by(first_signals) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(min(remaining, 0.1))
            leftovers = list(self._running.values())
            cut_by = self._drain_cut_by(first_signals)
        if cut_by is not None:
            reason = f"{cut_by}: drain abandoned"
            if leftovers:
                logger.warning("worker %s: %s; releasing %d running job(s) now", self.worker_id, reason, len(leftovers))
        else:
            reason = f"drain deadline passed ({drain:g} s)"
        for entry in leftovers:
            self._release(entry, reason)
        for _ in range(self.concurrency):
            self._inbox.put(None)
        self._heartbeat_stop.set()
        self._maintenance.stop()
        # Handler threads whose job was released may still be inside a handler that ignores
        # cancellation; they are daemon threads, so wait only briefly.
        join_deadline = time.monotonic() + 1.0
        for thread in self._threads:
            if thread.name == "tether-heartbeat":
                thread.join(5.0)
            elif thread.name.startswith("tether-worker-"):
                thread.join(max(join_deadline - time.monotonic(), 0.0))
        self._completions.close()
        stats = self.stats
        logger.info("worker %s stopped: %s", self.worker_id, stats)
        return stats

    def _drain_cut_by(self, first_signals: int) -> str | None:
        """What ended the drain early: ``"second SIGTERM"`` (or SIGINT), ``"second stop request"``;
        None while nothing has."""
        if self._signals > first_signals:
            return f"second {self._signal_name()}"
        return "second stop request" if self._cut_drain.is_set() else None

    def _signal_name(self) -> str:
        """``"SIGTERM"``: the name of the last signal received."""
        try:
            return signal.Signals(self._last_signal).name
        except ValueError:
            return f"signal {self._last_signal}"

    def request_stop(self) -> None:
        """Ask :meth:`run` to shut down, from any thread (SIGINT/SIGTERM do the same).
        A second request during the drain ends the drain at once."""
        if self._stop_requested.is_set():
            self._cut_drain.set()
        self._stop_requested.set()

    def run(self, stop_when_idle: bool = False, install_signal_handlers: bool = True) -> WorkerStats:
        """Start, block until asked to stop, then shut down as :meth:`stop` does.

        Args:
            stop_when_idle: also stop once no job of this pool's queues is ``queued``,
                ``retrying`` (due or not) or ``running`` (checked with ``count_by_status``).
            install_signal_handlers: handle SIGINT/SIGTERM as a stop request (only when called on
                the main thread; the previous handlers are restored on return).

        Returns:
            the final :class:`WorkerStats`.
        """
        previous: dict[signal.Signals, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._on_signal)
        try:
            self.start()
            while not self._stop_requested.is_set() and not self._signals:
                time.sleep(RUN_POLL_SECONDS)
                if stop_when_idle and self._idle():
                    logger.info("worker %s: no job left in its queues; stopping", self.worker_id)
                    break
            if self._signals:
                logger.info(
                    "worker %s: stop requested by %s (a second one abandons the drain)", self.worker_id, self._signal_name()
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

    # -- threads -----------------------------------------------------------------------------
    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _join(self, name: str, timeout: float) -> None:
        for thread in self._threads:
            if thread.name == name and thread is not threading.current_thread():
                thread.join(timeout)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Lock-free on purpose (see __init__); a second signal ends the drain at once.
        self._last_signal = signum
        self._signals += 1

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._stats[key] += n

    def _idle(self) -> bool:
        if self.in_flight:  # cheap check first: counting jobs can cost a scan of the store
            return False
        try:
            queues: Sequence[str | None] = self.queues if self.queues is not None else [None]
            for name in queues:
                counts = self.repository.count_by_status(queue=name)
                if counts[JobStatus.QUEUED] or counts[JobStatus.RETRYING] or counts[JobStatus.RUNNING]:
                    return False
        except Exception:  # noqa: BLE001 - unknown means not idle
            self._ratelog("idle", logging.WARNING, "worker %s: could not count jobs", self.worker_id, exc_info=True)
            return False
        return self.in_flight == 0

    def _acquire_loop(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            with self._lock:
                # While a completion flush is pending or on the wire it leases for the free
                # threads itself (``complete_and_lease``): one round trip for both.
                while (self._free() <= 0 or self._completions.refilling) and not self._stopping.is_set():
                    self._lock.wait(0.5)
                # Lease in batches: once a thread is free, wait up to LEASE_COALESCE_SECONDS for
                # half of them to be, so threads freed together by one completion flush are
                # refilled by one lease query instead of one query each.
                window_ends = time.monotonic() + LEASE_COALESCE_SECONDS
                while self._free() < self._lease_batch and not self._stopping.is_set():
                    remaining = window_ends - time.monotonic()
                    if remaining <= 0:
                        break
                    self._lock.wait(remaining)
                free = self._free()
                if free <= 0 or self._stopping.is_set():
                    continue
                self._reserved += free
            jobs: list[Job] = []
            try:
                jobs = self.dispatcher.acquire(
                    queues=self.queues,
                    worker_id=self.worker_id,
                    limit=free,
                    lease_timeout=self.lease_timeout,
                    max_wait=self.max_wait,
                )
                backoff = 0.0
            except Exception as exc:  # noqa: BLE001 - the loop must survive any storage trouble
                self._hand_out([], free)
                backoff = min(max(backoff * 2, ACQUIRE_BACKOFF[0]), ACQUIRE_BACKOFF[1])
                self._ratelog(
                    "acquire", logging.WARNING if isinstance(exc, StorageUnavailable) else logging.ERROR,
                    "worker %s: lease query failed (%s); retrying in %.2f s", self.worker_id, describe_failure(exc, 500),
                    backoff, exc_info=not isinstance(exc, StorageUnavailable),
                )
                self._stopping.wait(backoff * (0.5 + random.random() / 2))
                continue
            self._hand_out(jobs, free)
            if jobs:
                time.sleep(0)  # let a woken handler thread take the GIL now, before this loop's next query

    def _hand_out(self, jobs: list[Job], reserved: int) -> None:
        """Give ``jobs`` (leased under a reservation of ``reserved``) to the handler threads; the
        reservation ends.  Jobs leased while shutdown began are released at once, unstarted."""
        entries: list[_Running] = []
        late: list[Job] = []
        for job in jobs:
            ctx = JobContext(
                job, repository=self.repository, clock=self.clock, lease_timeout=self.lease_timeout, worker_id=self.worker_id
            )
            entries.append(_Running(job, ctx))
        with self._lock:
            self._reserved -= reserved
            if self._stopping.is_set():
                late = [e.job for e in entries]
                entries = []
            for entry in entries:
                self._running[entry.job.id] = entry
            self._busy += len(entries)
            self._active += len(entries)
            self._wake_acquirer()
        for entry in entries:
            self._inbox.put(entry)
        for job in late:
            self._release_unstarted(job)

    def _prefetch_room(self) -> int:
        """Jobs to lease ahead of the free threads now (under ``self._lock``)."""
        seconds = self._handler_seconds
        if not self.prefetch or seconds is None:
            return 0
        if seconds <= 0:
            return self.prefetch
        return min(self.prefetch, int(self.concurrency * PREFETCH_HORIZON / seconds))

    def _reserve_refill(self, completing: int) -> int:
        """For a completion flush of ``completing`` jobs: how many to lease with it (reserved)."""
        with self._lock:
            if self._stopping.is_set():
                return 0
            free = self._free(completing)
            if free <= 0:
                return 0
            self._reserved += free
            return free

    def _deliver_refill(self, jobs: list[Job], reserved: int) -> None:
        try:
            self._hand_out(jobs, reserved)
        except BaseException:  # never break the flusher; the reaper takes them back
            logger.exception("worker %s: could not hand out %d job(s) leased with completions", self.worker_id, len(jobs))
        if jobs:
            told = getattr(self.dispatcher, "leased_directly", None)  # a third-party dispatcher may lack it
            if told is not None:
                try:
                    told(jobs)
                except Exception:  # noqa: BLE001 - a broker's bookkeeping never breaks the flusher
                    self._ratelog("note-leases", logging.WARNING, "worker %s: the dispatcher failed to note %d lease(s)", self.worker_id, len(jobs), exc_info=True)

    def _refill_idle(self) -> None:
        with self._lock:
            self._lock.notify_all()

    def _handler_loop(self) -> None:
        while True:
            entry = self._inbox.get()
            if entry is None:
                return
            started = time.monotonic()
            try:
                self._process(entry)
            except BaseException:  # one job never kills the thread (C18)
                logger.exception("worker %s: unexpected error while processing job %s", self.worker_id, entry.job.id)
            finally:
                seconds = time.monotonic() - started
                mean = self._handler_seconds  # a benign race: the mean only steers prefetching
                self._handler_seconds = seconds if mean is None else mean + PREFETCH_EMA_WEIGHT * (seconds - mean)
                if entry.deferred:  # the thread is free; the job stays in flight until written
                    with self._lock:
                        self._active -= 1
                        all_idle = self._active == 0
                        self._wake_acquirer()
                    if all_idle:  # a flush waiting for the threads' completions can go now
                        self._completions.poke()
                else:
                    self._finish(entry, active=True)

    def _free(self, completing: int = 0) -> int:
        """Jobs a lease query may ask for now (under ``self._lock``): free handler threads plus
        the prefetch room (:meth:`_prefetch_room`), less what lease queries on the wire reserved.

        A thread is free once its handler returned, even while that job's completion waits in
        the batcher (the job still counts in :attr:`in_flight` and is heartbeated until written);
        so that completions that are slow to write cannot pile up leases, the jobs in flight are
        also capped at twice ``concurrency`` (plus the prefetch room).  ``completing``: jobs whose
        completion the asking flush writes, no longer in flight once it returned.
        """
        ahead = self._prefetch_room()
        return min(
            self.concurrency + ahead - self._active, 2 * self.concurrency + ahead - (self._busy - completing)
        ) - self._reserved

    def _wake_acquirer(self) -> None:
        # Only when the acquirer may act (first free thread, half free, pool empty) or stop()
        # waits: a wake-up per job costs more than a no-op job.  Under self._lock.
        free = self._free()
        if free == 1 or free == self._lease_batch or self._busy == 0 or self._stopping.is_set():
            self._lock.notify_all()

    def _finish(self, entry: _Running, *, active: bool = False) -> None:
        """The job's outcome is written (or given up, or not to be written): it is no longer in
        flight.  ``active``: its handler thread is the caller, now free too."""
        with self._lock:
            if self._running.get(entry.job.id) is entry:
                del self._running[entry.job.id]
            self._busy -= 1
            all_idle = False
            if active:
                self._active -= 1
                all_idle = self._active == 0
            self._wake_acquirer()
        if all_idle:
            self._completions.poke()

    def _heartbeat_loop(self) -> None:
        while not self._heartbeat_stop.wait(self.heartbeat_interval):
            with self._lock:
                entries = list(self._running.values())
            for entry in entries:
                with entry.lock:
                    if entry.released:
                        continue
                    try:
                        entry.ctx.job = self.repository.heartbeat(
                            entry.job.id, entry.token, now=self.clock.now(), lease_timeout=self.lease_timeout
                        )
                    except LeaseLost:
                        if entry.finishing:  # its outcome write landed first, or will report LeaseLost itself
                            continue
                        entry.ctx.mark_lease_lost()
                        entry.lost_counted = True
                        self._count("lease_lost")
                        logger.warning(
                            "worker %s: heartbeat refused for job %s: lease lost (the reaper or another worker took it); "
                            "the handler's context is cancelled and its outcome will not be recorded",
                            self.worker_id, entry.job.id,
                        )
                    except Exception as exc:  # noqa: BLE001 - retry at the next beat
                        self._ratelog(
                            "heartbeat", logging.WARNING, "worker %s: heartbeat of job %s failed (%s); retrying next beat",
                            self.worker_id, entry.job.id, describe_failure(exc, 500),
                        )

    # -- one job -----------------------------------------------------------------------------
    def _process(self, entry: _Running) -> None:
        if entry.released:  # released at shutdown before this thread picked it up
            return
        result = execute_job(
            entry.job, entry.ctx, handlers=self.handlers, repository=self.repository, clock=self.clock,
            retry_policy=self.retry_policy, writer=_PoolWriter(self, entry), worker_id=self.worker_id,
        )
        counter = _COUNTERS.get(result.outcome)
        if counter is not None and not entry.deferred:  # a deferred completion is counted when written
            self._count(counter)
        if result.outcome is Outcome.RETRYING:
            self._announce(result.job)

    def _announce(self, job: Job) -> None:
        """Tell the dispatcher about a job that is leasable again (``retrying`` after a failure, or
        ``queued`` after a release at shutdown) so another worker is woken when it is due (Redis
        Streams publishes it then) instead of at the next sweep; never raises."""
        try:
            self.dispatcher.notify([job])
        except Exception:  # noqa: BLE001 - a lost notification costs latency, never the job
            self._ratelog("notify", logging.WARNING, "could not tell the dispatcher about %s job %d", job.status.value,
                          job.id, exc_info=True)

    def _defer_complete(self, entry: _Running) -> bool:
        """Hand the job's completion to the batcher; False when it is closed (write it here)."""
        expires = entry.ctx.job.lease_expires_at
        give_up_at = time.monotonic() + WRITE_RETRY_SECONDS
        if expires is not None:  # never retry past the lease: the reaper owns the job then
            give_up_at = min(give_up_at, time.monotonic() + (expires - self.clock.now()).total_seconds())
        entry.deferred = True
        if self._completions.submit(entry.job.id, entry.token, lambda result: self._completed(entry, result),
                                    give_up_at=give_up_at):
            return True
        entry.deferred = False
        return False

    def _completed(self, entry: _Running, result: Job | BaseException) -> None:
        """On the flusher thread: the completion of ``entry`` returned ``result``."""
        try:
            if isinstance(result, Job):
                entry.ctx.job = result
                self._count("completed")
            elif isinstance(result, LeaseLost):
                self._count("lease_lost")
                logger.warning(
                    "worker %s: complete of job %s refused: lease lost (the reaper or another worker took it); "
                    "nothing written", self.worker_id, entry.job.id,
                )
            elif isinstance(result, StorageUnavailable):
                logger.error(
                    "worker %s: giving up complete of job %s (%s); the reaper will take the job back when its lease "
                    "expires", self.worker_id, entry.job.id, describe_failure(result, 500),
                )
            else:
                logger.error("worker %s: complete of job %s failed; the reaper will take the job back",
                             self.worker_id, entry.job.id, exc_info=result)
        finally:
            self._finish(entry)

    def _begin_finish(self, entry: _Running) -> bool:
        """Claim the right to write the job's outcome; False if shutdown released it or the lease is lost."""
        with entry.lock:
            if entry.ctx.lease_lost and not entry.lost_counted:  # the handler's own ctx.heartbeat() was refused
                entry.lost_counted = True
                self._count("lease_lost")
            if entry.released or entry.ctx.lease_lost:
                return False
            entry.finishing = True
            return True

    def _write(self, entry: _Running, what: str, write: Callable[[], _T]) -> _T | None:
        """Run one fenced write, retrying ``StorageUnavailable`` while the lease may still be held.
        Returns the write's result, or None when it was refused (LeaseLost) or given up."""
        job = entry.job
        deadline = time.monotonic() + WRITE_RETRY_SECONDS
        expires = entry.ctx.job.lease_expires_at
        delay = 0.05
        while True:
            try:
                return write()
            except LeaseLost:
                self._count("lease_lost")
                logger.warning(
                    "worker %s: %s of job %s refused: lease lost (the reaper or another worker took it); nothing written",
                    self.worker_id, what, job.id,
                )
                return None
            except StorageUnavailable as exc:
                past_lease = expires is not None and self.clock.now() >= expires
                if time.monotonic() >= deadline or past_lease:
                    logger.error(
                        "worker %s: giving up %s of job %s (%s); the reaper will take the job back when its lease expires",
                        self.worker_id, what, job.id, describe_failure(exc, 500),
                    )
                    return None
                self._ratelog("write", logging.WARNING, "worker %s: %s of job %s failed (%s); retrying",
                              self.worker_id, what, job.id, describe_failure(exc, 500))
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except Exception:  # e.g. a bug in an adapter: never kill the thread
                logger.exception("worker %s: %s of job %s failed; the reaper will take the job back", self.worker_id, what, job.id)
                return None

    def _release(self, entry: _Running, reason: str) -> None:
        """Past the drain deadline (or when the drain was cut short, as ``reason`` says): cancel
        the handler and hand the job back under the fence."""
        with entry.lock:
            if entry.finishing or entry.released:
                return
            entry.released = True
            entry.ctx.cancel()
            try:
                released = self.repository.release(entry.job.id, entry.token, now=self.clock.now())
            except LeaseLost:
                self._count("lease_lost")
                logger.warning("worker %s: release of job %s refused: lease already lost", self.worker_id, entry.job.id)
                return
            except Exception:  # the reaper takes it back at lease expiry
                logger.exception(
                    "worker %s: could not release job %s; the reaper will take it back when its lease expires",
                    self.worker_id, entry.job.id,
                )
                return
        self._count("released")
        self._announce(released)
        logger.warning("worker %s: %s; job %s cancelled and released back to its queue", self.worker_id, reason, entry.job.id)

    def _release_prefetched(self) -> None:
        """At shutdown: jobs handed to the threads but not started yet (prefetched) go back to
        their queue at once, under the fence, the attempt given back; they are not run."""
        while True:
            try:
                entry = self._inbox.get_nowait()
            except queue_module.Empty:
                return
            if entry is None:  # pragma: no cover - sentinels are put only after this
                continue
            self._release(entry, "shutting down before it started")
            self._finish(entry, active=True)

    def _release_unstarted(self, job: Job) -> None:
        if job.lease_token is None:  # pragma: no cover - a dispatcher only returns leased jobs
            return
        try:
            released = self.repository.release(job.id, job.lease_token, now=self.clock.now())
        except LeaseLost:
            self._count("lease_lost")
        except Exception:
            logger.exception("worker %s: could not release unstarted job %s; the reaper will take it back", self.worker_id, job.id)
        else:
            self._count("released")
            self._announce(released)


__all__ = ["WorkerPool", "WorkerStats", "default_worker_id"]
