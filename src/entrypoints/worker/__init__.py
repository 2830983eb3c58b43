"""The worker pool: leases jobs, runs their handlers, and writes each outcome under the lease's fence.

:class:`WorkerPool` (:mod:`.pool`) only builds, starts and stops the parts below; each part is a
module that owns its thread and its state.  How one job passes between them:

1. **Lease** (:mod:`.acquirer`, thread ``tether-acquire``): asks the dispatcher for as many jobs
   as the runner has free slots plus the prefetch room (``acquire(limit=free, ...)``), waiting up
   to ``LEASE_COALESCE_SECONDS`` for half the slots to be free so one query refills many.  Each
   job becomes a :class:`~.held.HeldJob` in the pool's :class:`~.held.HeldJobs` (from now until
   its outcome is written the pool *holds* it) and is submitted to the runner.
2. **Run** (:mod:`.runner`, threads ``tether-worker-<i>``, ``concurrency`` of them): each thread
   takes the next job and runs its handler through
   :func:`~tether.entrypoints.execution.execute_job` (the step the test kit's
   :func:`tether.testing.drain` runs too).  Jobs beyond the free threads (prefetched) wait for a
   thread, held like running ones.
3. **Write the outcome** (:mod:`.outcomes`): every outcome is one fenced write.  A failure
   (``retrying`` with a backoff from the retry policy, or ``dead`` when attempts are used up or
   the handler raised :class:`~tether.domain.errors.PermanentError`; ``dead`` at once for a job
   type with no handler) is written by the handler thread, which then runs the failure hook
   (its errors logged and swallowed, case C17) and tells the dispatcher about the retry.  Any
   exception, even one that cannot be printed (case C18), becomes a bounded ``last_error``.
   A ``LeaseLost`` answer is logged and counted, never raised: the job belongs to someone else
   now.  ``StorageUnavailable`` is retried for at most ``WRITE_RETRY_SECONDS`` and never past the
   lease expiry.
4. **Complete in batches** (:mod:`.completions`, thread ``tether-complete``): a success is
   handed to the completion batcher and the thread is free at once; the batcher writes all the
   completions waiting at that moment in one ``complete_many`` (one round trip on PostgreSQL),
   each still its own compare-and-set on (id, running, token).  When the dispatcher leases
   straight from the repository the same round trip leases the next jobs for the free slots
   (``complete_and_lease``), and the acquirer waits while such a flush is pending.  Each job's
   outcome is recorded only after its write returned; only then does the pool stop holding it.
5. **Time limits** (:mod:`.timeouts`, thread ``tether-timeouts``, started by the first job whose
   handler has a limit): a handler past its ``timeout`` (or the pool's ``job_timeout``) has its
   context cancelled and its slot given to a new thread; the attempt keeps its lease until the
   handler returns or a hard bound passes, then fails with ``JobTimeout``.
6. **Meanwhile** (:mod:`.heartbeats`, thread ``tether-heartbeat``): every
   ``heartbeat_interval`` seconds each held lease is extended to ``now + lease_timeout`` (jobs
   running, prefetched, or waiting for their completion to be written); a refused heartbeat
   cancels that job's context.  After each pass the same thread refreshes the pool's entry in the
   worker registry (:mod:`.presence`: recorded at start, removed at a clean stop; information
   only).  The reaper runs every ``reap_interval`` seconds with the
   dispatcher's upkeep (``tether-maintenance``, :mod:`tether.entrypoints.maintenance`).  Periodic
   schedules are declared and ticked on ``tether-ticker`` (:mod:`.ticker`): each tick's job is
   enqueued once across every pool, at most 60 s ahead, never on the lease path.
7. **Shutdown** (:mod:`.shutdown`; :meth:`WorkerPool.stop`, or SIGINT/SIGTERM under
   :meth:`WorkerPool.run`): no lease is taken after the request; prefetched jobs, and jobs a
   lease query returned at that very moment, are released unstarted at once; held jobs get
   ``drain_timeout`` seconds to finish, then their contexts are cancelled and their jobs released
   under the fence (``queued``, due now, the attempt given back; case C16).  A second signal or
   :meth:`WorkerPool.request_stop` ends the drain at once.

**Supervision** (:mod:`.supervision`): every internal thread above (acquire, complete,
heartbeat, maintenance, timeouts) outlives whatever an adapter or a hook raises, ``BaseException``
subclasses such as ``asyncio.CancelledError`` included: each loop catches everything per pass, a
loop that crashes anyway runs again after a backoff, and a thread that died all the same is
started again by the pool's supervisor (from :meth:`WorkerPool.run`'s loop and after each
heartbeat pass), or the pool stops with a clear error.

What the parts share is :class:`~.held.HeldJobs`: the held jobs, their count, the stop flag and
the pool's one lock over them, under which the stats count too (:mod:`.stats`).  A job costs the
same locked sections and round trips as when the pool was one class.

**The runner seam.**  The acquirer sees the runner only through :class:`~.runner.Runner`: its
``slots``, its recent mean ``handler_seconds`` (for the prefetch room), ``free_slots()`` and
``submit(entries)``; shutdown adds ``release_unstarted``.  ``async def`` handlers run on an event
loop owned by the pool (:mod:`.async_runner`, thread ``tether-async``, up to
``async_concurrency`` at once), which implements the same interface and writes its outcomes
through the same :class:`~.outcomes.Outcomes`; when the pool has such handlers, what the acquirer
is given is one runner over the two (:class:`~.routing.RunnerByKind`) that submits each job to
the runner of its handler's kind.  The acquirer, the heartbeats, the batcher and shutdown do not
change.

Re-exported here: :class:`WorkerPool`, :class:`WorkerStats`, :func:`default_worker_id` and the
tuning constants.  The constants are read where they are used: to change one in a test, patch it
in its own module (e.g. ``tether.entrypoints.worker.acquirer.PREFETCH_HORIZON``).
"""

from tether.entrypoints.worker.acquirer import ACQUIRE_BACKOFF, LEASE_COALESCE_SECONDS, PREFETCH_HORIZON
from tether.entrypoints.worker.outcomes import WRITE_RETRY_SECONDS
from tether.entrypoints.worker.pool import RUN_POLL_SECONDS, WorkerPool, default_worker_id
from tether.entrypoints.worker.runner import PREFETCH_EMA_WEIGHT
from tether.entrypoints.worker.stats import WorkerStats
from tether.entrypoints.worker.timeouts import TIMEOUT_CHECK_SECONDS, TIMEOUT_GRACE_SECONDS

__all__ = [
    "ACQUIRE_BACKOFF",
    "LEASE_COALESCE_SECONDS",
    "PREFETCH_EMA_WEIGHT",
    "PREFETCH_HORIZON",
    "RUN_POLL_SECONDS",
    "TIMEOUT_CHECK_SECONDS",
    "TIMEOUT_GRACE_SECONDS",
    "WRITE_RETRY_SECONDS",
    "WorkerPool",
    "WorkerStats",
    "default_worker_id",
]
