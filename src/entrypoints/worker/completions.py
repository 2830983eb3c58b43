"""The worker pool's completion batcher: the successes of several handler threads in one write.

The worker pool queues the success of a job with :meth:`CompletionBatcher.submit` (a callback
per job) and its handler thread moves on; :meth:`CompletionBatcher.complete` is the blocking
form.  One flusher thread takes every completion waiting at that moment (up to ``max_batch``) and
writes them with a single :meth:`~tether.ports.repository.JobRepository.complete_many` call (one
round trip on PostgreSQL).  While a flush is on the wire the next completions pile up, so the batch
size follows the load by itself: one job alone is written at once, thousands per second go out
in batches, and no timer ever holds a completion back.

What each caller still gets (a fenced completion, in a batch):

- every item is its own compare-and-set on (id, ``running``, lease token) inside ``complete_many``;
- each item gets *its own* outcome: the completed :class:`Job`, or :class:`LeaseLost` when its
  token no longer held the job (the other items are unaffected);
- the outcome is delivered only after the write returned, so a job counts as finished only once
  its completion is stored;
- ``StorageUnavailable`` from the whole call is retried with backoff until each item's
  ``give_up_at`` (the pool passes the earlier of 30 s and the lease expiry), then delivered to
  that item; any other error of the call is delivered to every item of the batch at once.

**Refill** (optional, :class:`Refill`, given to the constructor or to
:meth:`CompletionBatcher.refill_with`): when the pool's dispatcher leases straight from the
repository, each flush also asks the pool how many jobs its free threads can take
(:attr:`Refill.reserve`, counting the threads this flush frees) and writes the batch with
:meth:`~tether.ports.repository.JobRepository.complete_and_lease` instead: the completions and
the next leases in one round trip (one statement on PostgreSQL).  The leased jobs go to
:attr:`Refill.deliver` after every completion of the batch was answered; on any error nothing
was leased and ``deliver`` gets ``[]``, so the reservation is always given back.  With a
refill the flusher also waits, up to :data:`REFILL_COALESCE_SECONDS` after its first pending
item, while the pool's handlers are still running jobs (:attr:`Refill.handlers_busy`; the pool
calls :meth:`CompletionBatcher.poke` when the last one returns): one statement then completes
what the threads finished together and leases their next jobs, instead of one statement per
thread.  A job alone is still written at once (no handler busy).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

import attrs
from tether.domain.errors import StorageRowError, StorageUnavailable
from tether.domain.failure import describe_failure
from tether.domain.job import Job
from tether.entrypoints.worker.supervision import SupervisedThread
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")

#: Most completions written by one ``complete_many`` call.
DEFAULT_MAX_BATCH = 100
#: Longest wait, in seconds, of a refilling flush for the pool's busy handlers to finish.
REFILL_COALESCE_SECONDS = 0.002


#: Callback of :meth:`CompletionBatcher.submit`: the completed job, or the error for that item.
Done = Callable[[Job | BaseException], None]


@attrs.frozen
class Refill:
    """How a flush leases the next jobs for the pool (see the module docstring).

    Attributes:
        queues, worker_id, lease_timeout: as for ``JobRepository.lease`` (seconds).
        reserve: ``reserve(completing)`` -> jobs to lease with a flush of ``completing`` items
            (0: write the completions only); the pool counts them as reserved until ``deliver``.
        deliver: ``deliver(jobs, reserved)``: the jobs leased (possibly fewer, or ``[]`` on an
            error) for a reservation of ``reserved``; must not raise.
        idle: called when the flusher has nothing pending or in flight (the pool's own lease
            loop, which waits while a flush may refill, goes on then).
        handlers_busy: True while a handler of the pool is running or a job waits for a thread
            (read without locks; only steers when to flush).
        next_queues: the queues of the next lease, listed in the order to prefer them (a pool
            serving several named queues rotates them); None: ``queues`` in one lease order.
        job_types: called after each ``reserve`` that reserved jobs, for the job types to lease
            (a pool leasing for its one kind of handler; None from it: every type); None (the
            field): every type.
    """

    queues: Sequence[str] | None
    worker_id: str
    lease_timeout: float
    reserve: Callable[[int], int]
    deliver: Callable[[list[Job], int], None]
    idle: Callable[[], None]
    handlers_busy: Callable[[], bool]
    next_queues: Callable[[], Sequence[str] | None] | None = None
    job_types: Callable[[], Sequence[str] | None] | None = None


class _Pending:
    __slots__ = ("done", "give_up_at", "job_id", "token")

    def __init__(self, job_id: int, token: str, done: Done, give_up_at: float) -> None:
        self.job_id = job_id
        self.token = token
        self.done = done
        self.give_up_at = give_up_at  # time.monotonic() past which storage errors are not retried


class CompletionBatcher:
    """Collects completions from handler threads and flushes them in batches on one thread.

    Args:
        repository: where completions are written (``complete_many``).
        clock: ``now`` of each flush (every item of a batch gets the same ``finished_at``).
        max_batch: most items per ``complete_many`` call (>= 1).
        name: the flusher thread's name.
        retry_delays: first and longest pause, in seconds, before a batch that hit
            ``StorageUnavailable`` is sent again (its items whose ``give_up_at`` passed get the
            error instead).
        refill: lease the pool's next jobs with each flush (:class:`Refill`); None: never.
        spawn: builds the flusher thread (``spawn(name, loop, stopped=...)``; the pool's supervisor).

    Call :meth:`start` before use and :meth:`close` at the end; after :meth:`close`,
    :meth:`complete` writes directly (one ``complete`` call in the caller's thread).
    """

    def __init__(
        self,
        repository: JobRepository,
        clock: Clock,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        name: str = "tether-complete",
        retry_delays: tuple[float, float] = (0.05, 2.0),
        refill: Refill | None = None,
        spawn: Callable[..., SupervisedThread] = SupervisedThread,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._repository = repository
        self._clock = clock
        self._max_batch = max_batch
        self._name = name
        self._retry_delays = retry_delays
        self._refill = refill
        self._flushing = False
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._closed = False
        self._spawn = spawn
        self._thread: SupervisedThread | None = None
        #: (flushes, items) written so far: items / flushes is the mean batch size.
        self.flushes = 0
        self.items = 0
        #: jobs leased by flushes (``complete_and_lease``) so far.
        self.leased = 0

    @property
    def refilling(self) -> bool:
        """True while a flush that may lease for the pool is pending or on the wire."""
        if self._refill is None:
            return False
        with self._cond:
            return self._flushing or bool(self._pending)

    def refill_with(self, refill: Refill) -> None:
        """Lease the pool's next jobs with each flush (see :class:`Refill`).

        Raises:
            RuntimeError: the flusher thread was started already.
        """
        if self._thread is not None:
            raise RuntimeError("refill_with() must be called before start()")
        self._refill = refill

    def poke(self) -> None:
        """Tell a flusher waiting for busy handlers (see :class:`Refill`) to look again."""
        with self._cond:
            self._cond.notify_all()

    def start(self) -> None:
        """Start the flusher thread (a daemon)."""
        self._thread = self._spawn(self._name, self._run, stopped=lambda: self._closed)
        self._thread.start()

    def submit(self, job_id: int, token: str, done: Done, *, give_up_at: float = 0.0) -> bool:
        """Queue this completion for the next batch; ``done(result)`` runs on the flusher thread
        once its write returned: the completed :class:`Job`, or the error for this item
        (:class:`LeaseLost`: the token no longer holds the job and nothing was written;
        ``StorageUnavailable`` once ``give_up_at`` (``time.monotonic()``) passed with the store
        still failing; any other error of the call at once).  ``done`` must not raise.

        Returns:
            False when the batcher is closed (nothing queued; the caller writes it itself).
        """
        with self._cond:
            if self._closed:
                return False
            self._pending.append(_Pending(job_id, token, done, give_up_at))
            if len(self._pending) == 1:
                self._cond.notify()
        return True

    def complete(self, job_id: int, token: str) -> Job:
        """Write this completion with the next batch and wait for it (without storage retries).

        Returns:
            the job as completed.

        Raises:
            LeaseLost: ``token`` no longer holds the job; nothing was written for it.
            StorageUnavailable: the batch could not be written (the caller decides about retries).
        """
        answer: list[Job | BaseException] = []
        finished = threading.Event()

        def done(result: Job | BaseException) -> None:
            answer.append(result)
            finished.set()

        if not self.submit(job_id, token, done):
            return self._repository.complete(job_id, token, now=self._clock.now())
        finished.wait()
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is waiting, stop the flusher thread (waiting up to ``timeout`` s).  Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        retry: list[_Pending] = []
        delay = self._retry_delays[0]
        while True:
            with self._cond:
                if not self._pending and not retry:
                    went_idle = self._flushing
                    self._flushing = False
                    if went_idle and self._refill is not None:
                        self._cond.release()  # never call the pool under our lock
                        try:
                            self._refill.idle()
                        except BaseException:
                            logger.exception("the completion flusher's idle callback raised")
                        finally:
                            self._cond.acquire()
                while not self._pending and not retry and not self._closed:
                    self._cond.wait()
                if not self._pending and not retry:
                    return
                if self._refill is not None and not retry:  # let the threads' completions gather
                    ends = time.monotonic() + REFILL_COALESCE_SECONDS
                    while len(self._pending) < self._max_batch and not self._closed and self._busy():
                        remaining = ends - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                room = max(self._max_batch - len(retry), 0)
                batch = retry + self._pending[:room]
                del self._pending[:room]
                self._flushing = True
            retry = self._flush(batch)
            if retry:
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self._retry_delays[1])
            else:
                delay = self._retry_delays[0]

    def _busy(self) -> bool:
        try:
            return self._refill is not None and self._refill.handlers_busy()
        except BaseException:  # noqa: BLE001 - unknown: flush now
            return False

    def _flush(self, batch: list[_Pending]) -> list[_Pending]:
        """Write ``batch``; answer every item, except those to send again (returned).  Never
        raises: whatever goes wrong, every item is answered or returned."""
        refill = self._refill
        reserved = 0
        jobs: list[Job] = []
        try:
            reserved = refill.reserve(len(batch)) if refill is not None else 0
            items = [(p.job_id, p.token) for p in batch]
            if reserved > 0 and refill is not None:
                rotate = refill.next_queues
                options: dict[str, object] = {} if rotate is None else {"listed_order": True}
                types = None if refill.job_types is None else refill.job_types()
                if types is not None:
                    options["job_types"] = types
                results, jobs = self._repository.complete_and_lease(
                    items, now=self._clock.now(), queues=refill.queues if rotate is None else rotate(),
                    worker_id=refill.worker_id, lease_timeout=refill.lease_timeout, limit=reserved,
                    **options,  # type: ignore[arg-type]
                )
            else:
                results = self._repository.complete_many(items, now=self._clock.now())
            if len(results) != len(batch):  # pragma: no cover - an adapter bug; never guess who landed
                raise RuntimeError(f"complete_many answered {len(results)} results for {len(batch)} items")
        except StorageRowError as exc:  # a row was refused: the others must not share its fate
            if refill is not None and reserved:
                refill.deliver([], reserved)
            return self._one_by_one(batch, exc)
        except StorageUnavailable as exc:
            if refill is not None and reserved:
                refill.deliver([], reserved)
            now = time.monotonic()
            again = [p for p in batch if now < p.give_up_at]
            for p in batch:
                if now >= p.give_up_at:
                    self._answer(p, exc)
            if again:
                logger.warning("completions of %d job(s) failed (%s); retrying", len(again), describe_failure(exc, 500))
            return again
        except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets the error
            if refill is not None and reserved:
                refill.deliver(jobs, reserved)
            for p in batch:
                self._answer(p, exc)
            return []
        self.flushes += 1
        self.items += len(batch)
        self.leased += len(jobs)
        for p, result in zip(batch, results):
            self._answer(p, result)
        if refill is not None and reserved:
            refill.deliver(jobs, reserved)
        return []

    def _one_by_one(self, batch: list[_Pending], error: StorageRowError) -> list[_Pending]:
        """``batch`` was refused because of a row: write each item alone, so each gets its own
        answer (the bad one its error); items that meet ``StorageUnavailable`` are returned to be
        sent again while their ``give_up_at`` allows.  Never raises."""
        if len(batch) == 1:
            self._answer(batch[0], error)
            return []
        logger.warning("completions of %d job(s) refused because of a row (%s); writing them one by one", len(batch),
                       describe_failure(error, 500))
        again: list[_Pending] = []
        for p in batch:
            result: Job | BaseException
            try:
                result = self._repository.complete_many([(p.job_id, p.token)], now=self._clock.now())[0]
            except StorageRowError as exc:
                result = exc
            except StorageUnavailable as exc:
                if time.monotonic() < p.give_up_at:
                    again.append(p)
                    continue
                result = exc
            except BaseException as exc:  # noqa: BLE001 - this item's caller gets the error
                result = exc
            if isinstance(result, Job):
                self.items += 1
            self._answer(p, result)
        self.flushes += 1
        return again

    @staticmethod
    def _answer(pending: _Pending, result: Job | BaseException) -> None:
        try:
            pending.done(result)
        except BaseException:  # one callback never stops the flusher
            logger.exception("completion callback for job %s raised", pending.job_id)


__all__ = ["DEFAULT_MAX_BATCH", "REFILL_COALESCE_SECONDS", "CompletionBatcher", "Done", "Refill"]
