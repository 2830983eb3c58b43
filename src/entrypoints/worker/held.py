"""The jobs a worker pool holds: one :class:`HeldJob` per lease, and :class:`HeldJobs`, the book of
them under the pool's one lock that every part shares.

A job is *held* from the moment a lease query returned it until its outcome was written (or given
up, or it was released at shutdown): while prefetched, while its handler runs, and while its
completion waits in the batcher.  The heartbeats extend the lease of every held job; shutdown
releases the held jobs that are left when the drain ends; the acquirer leases no more than the
room the held jobs leave.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence

from tether.domain.job import Job
from tether.entrypoints.context import JobContext


class HeldJob:
    """One leased job of the pool, from its lease until its outcome is written.

    Attributes:
        job: the job as leased.
        ctx: its :class:`JobContext` (the handler's view; ``ctx.job`` follows the heartbeats).
        token: the lease token every write on the job is fenced by.
        lock: serialises the writes on this lease (outcome, heartbeat, release).
        finishing: its outcome is being written (by its handler's thread, or, for a timeout, by
            whoever claimed it first).
        released: handed back at shutdown; nothing more is written for it.
        lost_counted: a ``LeaseLost`` for this lease is in the stats already.
        deferred: its completion is with the batcher, which finishes the entry.
        handler_returned: its handler returned (or raised); it can no longer time out.
        started: ``time.monotonic()`` when its handler started (0.0 before), for observers.
        on_loop: it went to the pool's event loop (an ``async def`` handler), not to a thread.

    Set only for a job whose handler has a time limit (:mod:`.timeouts`):

    Attributes:
        timeout: the limit, in seconds (None: no limit).
        deadline: ``time.monotonic()`` when the limit passes (infinity: no limit).
        timed_out: the limit passed while the handler ran: its context is cancelled, and only a
            ``JobTimeout`` failure may be written for this attempt.
        replaced: its thread's slot was given to a replacement thread; the thread ends once the
            handler returns.
        settled: the timeout's failure was written (or given up) by the watchdog or shutdown,
            which no longer hold the job; its thread must not finish it again.
    """

    def __init__(self, job: Job, ctx: JobContext) -> None:
        self.job = job
        self.ctx = ctx
        self.token: str = ctx.token
        self.lock = threading.Lock()
        self.finishing = False
        self.released = False
        self.lost_counted = False
        self.deferred = False
        self.handler_returned = False
        self.started = 0.0
        self.on_loop = False
        self.timeout: float | None = None
        self.deadline = math.inf
        self.timed_out = False
        self.replaced = False
        self.settled = False


class HeldJobs:
    """The held jobs of one pool, the count of them, the stop flag, and the lock over all three.

    The acquirer, the runner, the completion callbacks and shutdown all change these under
    :attr:`lock`, the pool's only lock on the path of a job (the stats count under it too).

    Attributes:
        lock: the pool's lock; waiting on it is waiting for room or for the drain.
        by_id: job id -> its entry (the newest lease's, when a job was leased again while the
            old entry was still being written).
        in_flight: jobs held (entries not finished yet; can exceed ``len(by_id)`` in that case).
        stopping: set once shutdown began (no more leases).
        wake: called under :attr:`lock` whenever a job leaves a runner or the book; the pool sets
            it to the acquirer's :meth:`~tether.entrypoints.worker.acquirer.Acquirer.wake`
            (default: wake every waiter).
    """

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.by_id: dict[int, HeldJob] = {}
        self.in_flight = 0
        self.stopping = threading.Event()
        self.wake: Callable[[], None] = self.lock.notify_all

    def add(self, entries: Sequence[HeldJob]) -> None:
        """Hold these entries (call under :attr:`lock`)."""
        for entry in entries:
            self.by_id[entry.job.id] = entry
        self.in_flight += len(entries)

    def drop(self, entry: HeldJob) -> None:
        """``entry`` is finished: its outcome is written, given up, or not to be written (call
        under :attr:`lock`)."""
        if self.by_id.get(entry.job.id) is entry:
            del self.by_id[entry.job.id]
        self.in_flight -= 1

    def finish(self, entry: HeldJob) -> None:
        """:meth:`drop` ``entry`` under the lock, and :attr:`wake` whoever waits for room."""
        with self.lock:
            self.drop(entry)
            self.wake()

    def snapshot(self) -> list[HeldJob]:
        """The entries held now."""
        with self.lock:
            return list(self.by_id.values())


class HeldJobsByKind(HeldJobs):
    """The held jobs of a pool with both thread-run and ``async def`` handlers, also counted by
    kind, so that it leases no more of a kind than that kind has slots (see
    :class:`~tether.entrypoints.worker.acquirer.Acquirer`).

    Attributes:
        on_loop: jobs held that went to the event loop (``HeldJob.on_loop``; the rest went to
            the threads); the router counts them in as it hands them over.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_loop = 0

    def drop(self, entry: HeldJob) -> None:
        super().drop(entry)
        if entry.on_loop:
            self.on_loop -= 1


__all__ = ["HeldJob", "HeldJobs", "HeldJobsByKind"]
