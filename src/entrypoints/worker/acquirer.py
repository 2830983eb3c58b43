"""The worker pool's acquiring loop: leases jobs for the runner's free slots and hands them over.

The ``tether-acquire`` thread asks the dispatcher for as many jobs as the runner has free slots
plus the prefetch room (``acquire(limit=free, ...)``), holds them (:class:`HeldJobs`) and
submits them to the runner (:class:`~tether.entrypoints.worker.runner.Runner`).

- **Room** (:meth:`Acquirer.free`): free slots plus the prefetch room (none while a queue the
  pool serves has a running limit: :mod:`.queue_limits`), less what lease queries
  on the wire reserved.  The prefetch room is at most ``prefetch`` and at most what the slots would
  start within :data:`PREFETCH_HORIZON` seconds at the runner's recent mean handler time (none
  before the first handler returned), so slow jobs are not leased ahead.  A slot is free once its
  handler returned, even while that job's completion is still being written (the job stays held,
  heartbeated, until its write returned), so leasing overlaps with writing; so that slow writes
  cannot pile up leases, the held jobs are also capped at twice the slots (plus the prefetch room).
- **Coalescing**: once one slot is free the loop waits up to :data:`LEASE_COALESCE_SECONDS` for
  half of them to be, so one lease query refills many slots.  A wake-up per finished job would
  cost more than a no-op job, so :meth:`Acquirer.wake` (called whenever a job leaves a slot or
  the book) notifies only when the loop may act.
- **Refills**: when the dispatcher leases straight from the repository
  (``Dispatcher.leases_from``), the completion flush leases for the free slots too
  (``complete_and_lease``: one round trip; :meth:`Acquirer.refill` gives the batcher its
  :class:`~tether.entrypoints.worker.completions.Refill`), and this loop waits while such a flush
  is pending or on the wire; it leases itself when the pool is starting or idle.
- **Fairness across queues**: a pool serving several named queues rotates which one it asks
  first, one lease query (its own or a refilling flush's) after another (:meth:`Acquirer.next_queues`,
  ``listed_order=True``), so a backlog in one queue cannot starve the others; within a queue, and
  for a pool on all queues, the strict lease order holds.
- **Two kinds of handler** (a pool with ``async def`` handlers beside its threads, and a
  dispatcher whose ``acquire`` takes ``job_types``): the room is counted per kind, each kind's
  slots less the jobs of that kind the pool holds (waiting, running, or with their completion
  on the wire) and no prefetch, and each kind is leased with its own job types
  (:meth:`Acquirer._acquire_by_kind`), so the pool never holds more jobs of a kind than that
  kind has slots.  While both kinds have room, one lease of both kinds' types asks for the
  smaller room (whatever comes back fits either kind), and only when it came back full does a
  lease per kind ask for what is left; the completion flush leases nothing then.  While only one
  kind has handlers (an all-``async def`` pool), the completion flush refills that kind's slots
  with its job types (``complete_and_lease(job_types=...)``), freed by the completions it writes.
  A pool whose handlers are all plain leases exactly as before (one unfiltered lease query).
- **Storage trouble** (``StorageUnavailable`` or any other error from the dispatcher) is logged
  at most about once a second and retried with a bounded exponential backoff
  (:data:`ACQUIRE_BACKOFF`).
- **Shutdown**: no lease is taken once the pool is stopping; jobs a lease query returned at that
  very moment are released unstarted at once.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import StorageUnavailable
from tether.domain.failure import describe_failure
from tether.domain.job import Job
from tether.entrypoints.context import JobContext
from tether.entrypoints.worker.completions import CompletionBatcher, Refill
from tether.entrypoints.worker.held import HeldJob, HeldJobs, HeldJobsByKind
from tether.entrypoints.worker.queue_limits import QueueLimits
from tether.entrypoints.worker.routing import RunnerByKind
from tether.entrypoints.worker.runner import Runner
from tether.entrypoints.worker.supervision import SupervisedThread
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")

#: Backoff after a failed lease query, in seconds: doubles from the first to the second value.
ACQUIRE_BACKOFF = (0.05, 5.0)
#: Longest wait, in seconds, for half the runner's slots to be free before a lease query asks for
#: fewer jobs; the query then asks for exactly the free slots anyway.
LEASE_COALESCE_SECONDS = 0.002
#: Prefetch horizon, in seconds: beyond its free slots a pool leases at most as many jobs as its
#: runner is expected to start within this time at the recent mean handler time (and at most
#: ``prefetch``), so a pool running long jobs leases none ahead of its threads.
PREFETCH_HORIZON = 0.05


def accepts_keyword(function: Callable[..., object], name: str) -> bool:
    """True when ``function`` takes the keyword ``name`` (or any keyword): a port method of an
    adapter written against an older port may lack a newer optional parameter."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class Acquirer:
    """The ``tether-acquire`` thread of a pool (see the module docstring).

    Args:
        held: the pool's held jobs (its lock is the one the loop waits on).
        runner: where leased jobs go.
        completions: the pool's batcher (the loop waits while a refilling flush is pending).
        repository, dispatcher, clock: the ports.
        queues, worker_id, lease_timeout, max_wait: as for ``Dispatcher.acquire`` (seconds).
        prefetch: most jobs leased ahead of the free slots (0-1024).
        ratelog: the pool's rate-limited log.
        release_unstarted: hands back a job leased while shutdown began; never raises.
        spawn: builds the thread (``spawn(name, loop, stopped=...)``; the pool's supervisor).
        queue_limits: the pool's view of its queues' controls: no prefetch while one is limited.
    """

    def __init__(
        self,
        *,
        held: HeldJobs,
        runner: Runner,
        completions: CompletionBatcher,
        repository: JobRepository,
        dispatcher: Dispatcher,
        clock: Clock,
        queues: Sequence[str] | None,
        worker_id: str,
        lease_timeout: float,
        max_wait: float,
        prefetch: int,
        ratelog: RateLimitedLog,
        release_unstarted: Callable[[Job], None],
        spawn: Callable[..., SupervisedThread] = SupervisedThread,
        queue_limits: QueueLimits | None = None,
    ) -> None:
        self._queue_limits = queue_limits
        self._held = held
        self._lock = held.lock
        self._runner = runner
        self._completions = completions
        self._repository = repository
        self._dispatcher = dispatcher
        self._clock = clock
        self._queues = queues
        self._worker_id = worker_id
        self._lease_timeout = lease_timeout
        self._max_wait = max_wait
        self._prefetch = prefetch
        self._ratelog = ratelog
        self._release_unstarted = release_unstarted
        self._reserved = 0  # jobs a lease query on the wire may return (this loop or a refilling flush)
        self._lease_batch = max(1, runner.slots // 2)  # free slots worth a lease query at once
        self._thread = spawn("tether-acquire", self._run, stopped=held.stopping.is_set)
        self._turn = itertools.count()  # which queue goes first in the next lease query
        self._rotates = queues is not None and len(queues) > 1
        self._acquire_listed = self._rotates and accepts_keyword(dispatcher.acquire, "listed_order")
        #: the two runners, when the pool leases for each kind with its own job types; else None
        self._kinds: RunnerByKind | None = None
        self._kind_reserved = [0, 0]  # what lease queries on the wire reserved: threads, loop
        self._refill_reserved: tuple[int, list[str]] | None = None  # the kind and types of the flush's reservation
        if (isinstance(runner, RunnerByKind) and isinstance(held, HeldJobsByKind)
                and accepts_keyword(dispatcher.acquire, "job_types") and accepts_keyword(repository.lease, "job_types")):
            self._kinds = runner
            self.free = self._free_by_kind  # type: ignore[method-assign]
            self.wake = self._wake_by_kind  # type: ignore[method-assign]

    def start(self) -> None:
        """Start the thread (a daemon)."""
        self._thread.start()

    def interrupt(self) -> None:
        """Once the pool is stopping: end a wait for room, and the dispatcher's wait for work."""
        with self._lock:
            self._lock.notify_all()
        self._dispatcher.wake()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end (after :meth:`interrupt`)."""
        self._thread.join(timeout)

    def free(self, completing: int = 0) -> int:
        """Jobs a lease query may ask for now (under the pool's lock): free slots plus the
        prefetch room, less what lease queries on the wire reserved; and the held jobs stay
        below twice the slots plus the prefetch room.  ``completing``: jobs whose completion the
        asking flush writes, no longer held once it returned."""
        ahead = self._prefetch_room()
        runner = self._runner
        return min(
            runner.free_slots() + ahead, 2 * runner.slots + ahead - (self._held.in_flight - completing)
        ) - self._reserved

    def wake(self) -> None:
        """Under the pool's lock, after a job left a slot or the book: notify the loop only when
        it may act (first free slot, half free, pool empty) or shutdown waits."""
        free = self.free()
        if free == 1 or free == self._lease_batch or self._held.in_flight == 0 or self._held.stopping.is_set():
            self._lock.notify_all()

    def refill(self, handlers_busy: Callable[[], bool]) -> Refill | None:
        """How the completion flush leases for this pool, or None when the dispatcher does not
        lease straight from the repository, or when this pool leases per kind with handlers of
        both kinds (the flush's lease could not choose the kind) or with a repository whose
        ``complete_and_lease`` takes no ``job_types``.  ``handlers_busy``: the runner's ``busy``."""
        leases_from = getattr(self._dispatcher, "leases_from", None)  # a third-party dispatcher may lack it
        if leases_from is None or not leases_from(self._repository):
            return None
        complete_and_lease = self._repository.complete_and_lease
        if self._kinds is not None and (self._one_kind() is None or not accepts_keyword(complete_and_lease, "job_types")):
            return None
        rotate = self._rotates and accepts_keyword(complete_and_lease, "listed_order")
        return Refill(
            queues=self._queues, worker_id=self._worker_id, lease_timeout=self._lease_timeout,
            reserve=self._reserve_refill, deliver=self._deliver_refill, idle=self._refill_idle,
            handlers_busy=handlers_busy, next_queues=self.next_queues if rotate else None,
            job_types=None if self._kinds is None else self._refill_types,
        )

    def next_queues(self) -> Sequence[str] | None:
        """The pool's queues for the next lease query: rotated by one from the last query's when
        it serves several named queues (so each goes first in turn), else as given."""
        queues = self._queues
        if not self._rotates or queues is None:
            return queues
        first = next(self._turn) % len(queues)
        return [*queues[first:], *queues[:first]]

    def _run(self) -> None:
        stopping = self._held.stopping
        backoff = 0.0
        while not stopping.is_set():
            if self._queue_limits is not None:  # outside the pool's lock
                self._queue_limits.refresh()  # at most once a second
                self._queue_limits.announce_freed()  # freed slots of limited queues not yet announced
            with self._lock:
                # While a completion flush is pending or on the wire it leases for the free
                # slots itself (``complete_and_lease``): one round trip for both.
                while (self.free() <= 0 or self._completions.refilling) and not stopping.is_set():
                    self._lock.wait(0.5)
                # Lease in batches: once a slot is free, wait up to LEASE_COALESCE_SECONDS for
                # half of them to be, so slots freed together by one completion flush are
                # refilled by one lease query instead of one query each.
                window_ends = time.monotonic() + LEASE_COALESCE_SECONDS
                while self.free() < self._lease_batch and not stopping.is_set():
                    remaining = window_ends - time.monotonic()
                    if remaining <= 0:
                        break
                    self._lock.wait(remaining)
                free = self.free()
                if free <= 0 or stopping.is_set():
                    continue
                rooms = None
                if self._kinds is None:
                    self._reserved += free
                else:  # reserved per kind, given back by _hand_out
                    rooms = self._kind_rooms()
                    self._kind_reserved = [self._kind_reserved[0] + rooms[0], self._kind_reserved[1] + rooms[1]]
                    free = 0
            jobs: list[Job] = []
            try:
                if rooms is None:
                    jobs = self._dispatcher.acquire(
                        queues=self.next_queues(),
                        worker_id=self._worker_id,
                        limit=free,
                        lease_timeout=self._lease_timeout,
                        max_wait=self._max_wait,
                        **({"listed_order": True} if self._acquire_listed else {}),
                    )
                else:
                    jobs = self._acquire_by_kind(rooms)
                backoff = 0.0
            except BaseException as exc:  # noqa: BLE001 - the loop survives anything (asyncio.CancelledError too)
                self._hand_out([], free, rooms)
                backoff = min(max(backoff * 2, ACQUIRE_BACKOFF[0]), ACQUIRE_BACKOFF[1])
                self._ratelog(
                    "acquire", logging.WARNING if isinstance(exc, StorageUnavailable) else logging.ERROR,
                    "worker %s: lease query failed (%s); retrying in %.2f s", self._worker_id, describe_failure(exc, 500),
                    backoff, exc_info=not isinstance(exc, StorageUnavailable),
                )
                stopping.wait(backoff * (0.5 + random.random() / 2))
                continue
            self._hand_out(jobs, free, rooms)
            if jobs:
                time.sleep(0)  # let a woken handler thread take the GIL now, before this loop's next query

    # -- two kinds of handler ------------------------------------------------------------------
    def _kind_rooms(self, completing: tuple[int, int] = (0, 0)) -> tuple[int, int]:
        """(threads, loop): how many jobs of each kind a lease query may ask for now (under the
        pool's lock): the kind's slots less the jobs of that kind held (so none beyond its slots,
        prefetched or completing included) and less what queries on the wire reserved.
        ``completing``: jobs of each kind whose completion the asking flush writes, no longer
        held once it returned."""
        kinds = self._kinds
        held = self._held
        assert kinds is not None and isinstance(held, HeldJobsByKind)
        on_loop = held.on_loop - completing[1]
        on_threads = held.in_flight - held.on_loop - completing[0]
        thread_types, loop_types = kinds.job_types()  # a kind without handlers has no room
        threads = min(kinds.threads.free_slots(), kinds.threads.slots - on_threads) if thread_types else 0
        loop = min(kinds.loop.free_slots(), kinds.loop.slots - on_loop) if loop_types else 0
        return max(threads - self._kind_reserved[0], 0), max(loop - self._kind_reserved[1], 0)

    def _one_kind(self) -> tuple[int, list[str]] | None:
        """(0 threads or 1 loop, its job types) while only that kind has handlers, else None."""
        assert self._kinds is not None
        thread_types, loop_types = self._kinds.job_types()
        if bool(thread_types) == bool(loop_types):
            return None
        return (1, loop_types) if loop_types else (0, thread_types)

    def _free_by_kind(self, completing: int = 0) -> int:
        """:meth:`free` of a pool leasing per kind: the rooms of both kinds together."""
        threads, loop = self._kind_rooms()
        return threads + loop

    def _wake_by_kind(self) -> None:
        """:meth:`wake` of a pool leasing per kind: notify whenever a kind has room."""
        if self._free_by_kind() > 0 or self._held.in_flight == 0 or self._held.stopping.is_set():
            self._lock.notify_all()

    def _acquire_by_kind(self, rooms: tuple[int, int]) -> list[Job]:
        """Lease for the ``rooms`` (threads, loop) of the two kinds, each kind's jobs no more than
        its room: while both have room, one lease of both kinds' types for the smaller room (any
        mix of what it brings fits), and, only if it came back full, a lease per kind for what is
        left, without waiting; while one has room, a lease of its types.  The job types are read
        from the handlers at each call."""
        kinds = self._kinds
        assert kinds is not None
        thread_types, loop_types = kinds.job_types()
        room = {False: rooms[0], True: rooms[1]}
        types = {False: thread_types, True: loop_types}

        def lease(job_types: list[str], limit: int, max_wait: float) -> list[Job]:
            got = self._dispatcher.acquire(
                queues=self.next_queues(), worker_id=self._worker_id, limit=limit, lease_timeout=self._lease_timeout,
                max_wait=max_wait, job_types=job_types,  # type: ignore[call-arg]
                **({"listed_order": True} if self._acquire_listed else {}),
            )
            for job in got:  # what each kind has left
                room[kinds.runs_on_loop(job.job_type)] -= 1
            return got

        if room[False] > 0 and room[True] > 0:
            both = min(room[False], room[True])
            jobs = lease(thread_types + loop_types, both, self._max_wait)
            if len(jobs) < both:  # nothing more of either kind is due now
                return jobs
            wait = 0.0
        else:
            jobs, wait = [], self._max_wait
        for on_loop in (True, False):
            if room[on_loop] > 0:
                try:
                    jobs += lease(types[on_loop], room[on_loop], wait)
                except BaseException as exc:  # what is leased already is handed out, never lost
                    if not jobs:
                        raise
                    self._ratelog(
                        "acquire", logging.WARNING, "worker %s: a lease query failed (%s); handing out the %d job(s) "
                        "leased before it", self._worker_id, describe_failure(exc, 500), len(jobs),
                    )
                    break
        return jobs

    def _hand_out(self, jobs: list[Job], reserved: int, rooms: tuple[int, int] | None = None) -> None:
        """Hold ``jobs`` (leased under a reservation of ``reserved``, or of ``rooms`` per kind)
        and submit them to the runner; the reservation ends.  Jobs leased while shutdown began
        are released at once, unstarted."""
        entries: list[HeldJob] = []
        late: list[Job] = []
        try:
            for job in jobs:
                ctx = JobContext(
                    job, repository=self._repository, clock=self._clock, lease_timeout=self._lease_timeout,
                    worker_id=self._worker_id,
                )
                entries.append(HeldJob(job, ctx))
        except BaseException:
            with self._lock:
                self._reserved -= reserved  # given back whatever happens, so no room is lost for good
                if rooms is not None:
                    self._kind_reserved = [self._kind_reserved[0] - rooms[0], self._kind_reserved[1] - rooms[1]]
            raise
        with self._lock:
            self._reserved -= reserved
            if rooms is not None:
                self._kind_reserved = [self._kind_reserved[0] - rooms[0], self._kind_reserved[1] - rooms[1]]
            if self._held.stopping.is_set():
                late = [e.job for e in entries]
                entries = []
            self._held.add(entries)
            self._runner.submit(entries)
            self.wake()
        for job in late:
            self._release_unstarted(job)

    def _prefetch_room(self) -> int:
        """Jobs to lease ahead of the free slots now (under the pool's lock)."""
        seconds = self._runner.handler_seconds
        if not self._prefetch or seconds is None or (self._queue_limits is not None and self._queue_limits.limited):
            return 0  # never hold a limited queue's slots for jobs no thread can start yet
        if seconds <= 0:
            return self._prefetch
        return min(self._prefetch, int(self._runner.slots * PREFETCH_HORIZON / seconds))

    def _reserve_refill(self, completing: int) -> int:
        """For a completion flush of ``completing`` jobs: how many to lease with it (reserved);
        per kind, only while one kind has handlers, for that kind's room (:meth:`_refill_types`
        gives the flush that kind's job types)."""
        with self._lock:
            self._refill_reserved = None
            if self._held.stopping.is_set():
                return 0
            if self._kinds is not None:
                one = self._one_kind()
                if one is None:  # handlers of the other kind were registered since: the acquirer leases
                    return 0
                kind, types = one
                room = self._kind_rooms((completing, 0) if kind == 0 else (0, completing))[kind]
                if room <= 0:
                    return 0
                self._kind_reserved[kind] += room
                self._refill_reserved = (kind, types)
                return room
            free = self.free(completing)
            if free <= 0:
                return 0
            self._reserved += free
            return free

    def _refill_types(self) -> list[str] | None:
        """The job types of the kind the last :meth:`_reserve_refill` reserved for (per kind)."""
        reserved = self._refill_reserved
        return None if reserved is None else reserved[1]

    def _deliver_refill(self, jobs: list[Job], reserved: int) -> None:
        try:
            kind = self._refill_reserved
            if kind is None:
                self._hand_out(jobs, reserved)
            else:
                self._refill_reserved = None
                self._hand_out(jobs, 0, (reserved, 0) if kind[0] == 0 else (0, reserved))
        except BaseException:  # never break the flusher; the reaper takes them back
            logger.exception("worker %s: could not hand out %d job(s) leased with completions", self._worker_id, len(jobs))
        if jobs:
            told = getattr(self._dispatcher, "leased_directly", None)  # a third-party dispatcher may lack it
            if told is not None:
                try:
                    told(jobs)
                except BaseException:  # noqa: BLE001 - a broker's bookkeeping never breaks the flusher
                    self._ratelog("note-leases", logging.WARNING, "worker %s: the dispatcher failed to note %d lease(s)",
                                  self._worker_id, len(jobs), exc_info=True)

    def _refill_idle(self) -> None:
        with self._lock:
            self._lock.notify_all()


__all__ = ["ACQUIRE_BACKOFF", "LEASE_COALESCE_SECONDS", "PREFETCH_HORIZON", "Acquirer"]
