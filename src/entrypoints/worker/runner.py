"""Running handlers on threads: the :class:`Runner` interface the acquirer hands jobs through, and
:class:`ThreadRunner`, the ``concurrency`` handler threads of a pool.

A runner takes held jobs from the acquirer (:meth:`Runner.submit`) and runs each one's handler
through :func:`~tether.entrypoints.execution.execute_job`, writing the outcome with the pool's
:class:`~tether.entrypoints.worker.outcomes.Outcomes`.  The acquirer never looks further into a
runner than :class:`Runner`: how many jobs it can take (:meth:`Runner.free_slots`, and
:attr:`Runner.slots` with :attr:`Runner.handler_seconds` for the prefetch room), and
:meth:`Runner.submit`.  So a second runner (one running ``async def`` handlers on an event loop
owned by the pool) plugs in beside this one without a change to the acquirer.

:class:`ThreadRunner`: the ``tether-worker-<i>`` threads each take one job at a time from an
inbox, in the order the acquirer handed them.  Jobs beyond the free threads (prefetched) wait in
the inbox, held and heartbeated like running ones.  A thread is free once its handler returned,
even while the job's completion waits in the batcher (the job stays held until its write
returned), so leasing the next jobs overlaps with writing.  One job's error, whatever it is, never
ends the thread (case C18).

A handler past its time limit (:mod:`.timeouts`) gives its slot to a new thread
(:meth:`ThreadRunner.time_out`, :meth:`ThreadRunner.add_thread`); its own thread ends once the
handler returns.  The threads that read the inbox are always ``concurrency``: a replacement
starts as the timed-out thread stops counting.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from tether.domain.retry import RetryPolicy
from tether.entrypoints.execution import Execution, execute_job
from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.job_logs import enter_job, leave_job
from tether.entrypoints.worker.completions import CompletionBatcher
from tether.entrypoints.worker.held import HeldJob, HeldJobs
from tether.entrypoints.worker.observers import Observers
from tether.entrypoints.worker.outcomes import Outcomes
from tether.entrypoints.worker.timeouts import Timeouts
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")

#: Weight of the newest handler time in a runner's running mean of handler times (an exponential
#: moving average), which steers the acquirer's prefetch room.
PREFETCH_EMA_WEIGHT = 0.1


class Runner(Protocol):
    """What runs the handlers of held jobs, as the acquirer and shutdown see it.

    Members marked *locked* are called with the pool's lock (:attr:`HeldJobs.lock`) held: they
    only count and queue, never block.  A job handed to a runner stays held until the runner
    finished it (:meth:`HeldJobs.drop`), or until its completion was written
    (:meth:`Outcomes.completed` finishes it then); each time one of its jobs leaves a slot or the
    book, :attr:`HeldJobs.wake` is called under the lock, so the acquirer learns of the room.

    Attributes:
        slots: handlers it runs at the same time.
        handler_seconds: the recent mean time its handlers took, in seconds; None before the
            first returned (read without the lock: it only steers prefetching).
    """

    slots: int
    handler_seconds: float | None

    def free_slots(self) -> int:
        """*Locked*: :attr:`slots` less the jobs handed to it whose handler has not returned yet
        (below 0 while prefetched jobs wait for a slot)."""
        ...

    def submit(self, entries: Sequence[HeldJob]) -> None:
        """*Locked*: take these jobs (already held), to be run in this order as slots free."""
        ...

    def busy(self) -> bool:
        """True while a handler runs or a job waits for a slot (read without the lock)."""
        ...

    def release_unstarted(self, release: Callable[[HeldJob], None]) -> None:
        """At shutdown: take back every job handed to it that no handler started yet, pass each
        to ``release``, then finish it."""
        ...


class ThreadRunner(Runner):
    """``concurrency`` daemon threads running one job each at a time (a :class:`Runner`).

    Args:
        held: the pool's held jobs.
        outcomes: how outcomes are written and recorded.
        completions: the pool's batcher (told when the last busy handler returned, so a flush
            waiting for the threads' completions goes; see
            :class:`~tether.entrypoints.worker.completions.Refill`).
        handlers: job type -> :class:`HandlerSpec` (read at each job).
        repository, clock, retry_policy: as for :func:`~tether.entrypoints.execution.execute_job`.
        concurrency: threads (1-1024, checked by the pool).
        worker_id: for logs and error texts.
        timeouts: the pool's watchdog, told of every job whose handler has a time limit.
        job_timeout: the limit of handlers registered without one, in seconds, or None.
        observer: told when each handler starts and returns (see :mod:`.observers`), or None.
    """

    def __init__(
        self,
        *,
        held: HeldJobs,
        outcomes: Outcomes,
        completions: CompletionBatcher,
        handlers: Mapping[str, HandlerSpec],
        repository: JobRepository,
        clock: Clock,
        retry_policy: RetryPolicy,
        concurrency: int,
        worker_id: str,
        timeouts: Timeouts,
        job_timeout: float | None = None,
        observer: Observers | None = None,
    ) -> None:
        self.slots = concurrency
        self._observer = observer
        self.handler_seconds: float | None = None
        self._held = held
        self._lock = held.lock
        self._outcomes = outcomes
        self._completions = completions
        self._handlers = handlers
        self._repository = repository
        self._clock = clock
        self._retry_policy = retry_policy
        self._worker_id = worker_id
        self._timeouts = timeouts
        self._job_timeout = job_timeout
        self._active = 0  # jobs handed to the threads whose handler has not returned (running or waiting)
        self._abandoned = 0  # threads in a handler past its limit whose slot went to a new thread
        self._unreplaced: list[HeldJob] = []  # timed-out jobs whose thread keeps its slot: no leases meanwhile
        self._inbox: queue_module.SimpleQueue[HeldJob | None] = queue_module.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"tether-worker-{i}", daemon=True) for i in range(concurrency)
        ]

    # -- Runner ------------------------------------------------------------------------------
    def free_slots(self) -> int:
        free = self.slots - self._active
        return min(free, 0) if self._unreplaced else free

    def submit(self, entries: Sequence[HeldJob]) -> None:
        self._active += len(entries)
        for entry in entries:
            self._inbox.put(entry)

    def busy(self) -> bool:
        return self._active > 0

    def release_unstarted(self, release: Callable[[HeldJob], None]) -> None:
        while True:
            try:
                entry = self._inbox.get_nowait()
            except queue_module.Empty:
                return
            if entry is None:  # pragma: no cover - sentinels are put only after this
                continue
            release(entry)
            self._finish(entry)

    # -- threads -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the threads."""
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Ask every thread to end once the jobs queued before this call are done."""
        for _ in range(self.slots):  # the threads that read the inbox (abandoned ones end by themselves)
            self._inbox.put(None)

    def join(self, deadline: float) -> None:
        """Wait for the threads until ``deadline`` (``time.monotonic()``); a thread still inside
        a handler that ignores cancellation is a daemon and is left behind."""
        for thread in list(self._threads):
            thread.join(max(deadline - time.monotonic(), 0.0))

    # -- timeouts (see :mod:`.timeouts`) -----------------------------------------------------
    def time_out(self, entry: HeldJob) -> bool:
        """The handler of ``entry`` passed its limit (called with ``entry.lock`` held, so its
        thread, which takes that lock as the handler returns, sees this done).  Its slot goes to
        a new thread unless ``concurrency`` threads are abandoned already; then the thread keeps
        its slot and the pool leases nothing until one of them returns.  True: call
        :meth:`add_thread`."""
        with self._lock:
            if self._abandoned < self.slots:
                self._abandoned += 1
                entry.replaced = True
                self._active -= 1
                self._held.wake()
                return True
            self._unreplaced.append(entry)
            return False

    def add_thread(self) -> None:
        """Start a thread for the slot a timed-out handler gave up."""
        thread = threading.Thread(target=self._run, name=f"tether-worker-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def abandoned(self) -> int:
        """Threads still in a handler past its limit whose slot went to a new thread."""
        with self._lock:
            return self._abandoned

    def _after_timeout(self, entry: HeldJob) -> bool:
        """The handler of ``entry`` returned after its limit: write the ``JobTimeout`` failure
        unless the watchdog did at the hard bound, and free what the job held.  True: this
        thread's slot went to another thread, so it ends."""
        if not self._timeouts.settle(entry, drop=False) and entry.settled:
            logger.info(
                "worker %s: job %s returned past the hard bound of its %g s limit (or after the pool's stop); its "
                "attempt was written as timed out already, so nothing of this run is recorded", self._worker_id, entry.job.id,
                entry.timeout or 0.0,
            )
        start = False
        with self._lock:
            if not entry.settled:  # the watchdog finishes what it settled itself
                self._held.drop(entry)
            if entry.replaced:
                self._abandoned -= 1
                ends = True
                if self._unreplaced:  # a thread kept its slot for want of room: it gets its replacement now
                    waiting = self._unreplaced.pop(0)
                    waiting.replaced = True
                    self._abandoned += 1
                    self._active -= 1
                    start = True
            else:
                self._unreplaced.remove(entry)
                self._active -= 1
                ends = False
            all_idle = self._active == 0
            self._held.wake()
        if start:
            self.add_thread()
        if all_idle:
            self._completions.poke()
        return ends

    def _run(self) -> None:
        while True:
            entry = self._inbox.get()
            if entry is None:
                return
            started = entry.started = time.monotonic()
            ends = False
            try:
                self._process(entry)
            except BaseException:  # one job never kills the thread (C18)
                logger.exception("worker %s: unexpected error while processing job %s", self._worker_id, entry.job.id)
                with entry.lock:
                    entry.handler_returned = True
            finally:
                seconds = time.monotonic() - started
                mean = self.handler_seconds  # a benign race: the mean only steers prefetching
                self.handler_seconds = seconds if mean is None else mean + PREFETCH_EMA_WEIGHT * (seconds - mean)
                if entry.timed_out:  # stable once the handler returned (see time_out)
                    ends = self._after_timeout(entry)
                elif entry.deferred:  # the thread is free; the job stays held until its completion is written
                    with self._lock:
                        self._active -= 1
                        all_idle = self._active == 0
                        self._held.wake()
                    if all_idle:  # a flush waiting for the threads' completions can go now
                        self._completions.poke()
                else:
                    self._finish(entry)
            if ends:  # this thread's slot went to another thread
                return

    def _process(self, entry: HeldJob) -> None:
        if entry.released:  # released at shutdown before this thread picked it up
            return
        spec = self._handlers.get(entry.job.job_type)
        if spec is not None:
            timeout = spec.timeout if spec.timeout is not None else self._job_timeout
            if timeout is not None:
                self._timeouts.watch(entry, timeout)
        scope = enter_job(entry.job, self._worker_id)  # its log records say which job they are about
        try:
            observer = self._observer
            if observer is None:
                result = self._execute(entry)
            else:
                state = observer.job_started(entry.job, self._worker_id)
                returned: Execution | None = None
                try:
                    result = returned = self._execute(entry)
                finally:
                    observer.handler_returned(entry.job, state, returned)
            self._outcomes.record(entry, result)
        finally:
            leave_job(scope)

    def _execute(self, entry: HeldJob) -> Execution:
        return execute_job(
            entry.job, entry.ctx, handlers=self._handlers, repository=self._repository, clock=self._clock,
            retry_policy=self._retry_policy, writer=self._outcomes.writer(entry), worker_id=self._worker_id,
        )

    def _finish(self, entry: HeldJob) -> None:
        """The job's handler returned (or never started) and its outcome is written, given up, or
        not to be written: its slot is free and it is no longer held."""
        with self._lock:
            self._held.drop(entry)
            self._active -= 1
            all_idle = self._active == 0
            self._held.wake()
        if all_idle:
            self._completions.poke()


__all__ = ["PREFETCH_EMA_WEIGHT", "Runner", "ThreadRunner"]
