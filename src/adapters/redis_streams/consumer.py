"""Consuming: how the Redis Streams dispatcher reads stream entries and turns them into fenced leases.

* One consumer group (``group``) is shared by every worker of the application; consumer names are
  unique per process start
  (:func:`~tether.adapters.redis_streams.settings.default_consumer_name`), so a restarted worker never inherits
  (or is confused with) the pending entries of its previous life.
* :meth:`StreamConsumer.read`: ``XREADGROUP GROUP <group> <consumer> COUNT <limit> BLOCK ...`` over
  the streams of the worker's queues, on the calling thread's own connection.
* :meth:`StreamConsumer.take`: the ``k`` entries read from one queue's stream buy one fenced batch
  lease of up to ``k`` due queued/retrying jobs of that queue (``repository.lease``, lease order,
  one statement on SQL repositories); when fewer come back, each entry whose own job was not among
  them is tried by id.  Every entry is then acknowledged (:mod:`.acknowledger`: leased, already
  taken, finished, not due, malformed) except an id the repository cannot see yet, which is held
  (:mod:`.reclaimer`).  Entries read beyond ``limit`` are handed back.
* Wake-up: :meth:`StreamConsumer.wake` sends ``CLIENT UNBLOCK`` to the connections blocked in
  ``XREADGROUP``, so a blocked ``acquire`` returns at once (at worst after one ``block`` slice, if
  the wake-up races the start of the read); it also ends every :meth:`StreamConsumer.sleep`.

Ordering: the entries read together buy leases in the repository's lease order (priority first),
but a job whose entry sits deeper in the stream waits for it, so across a backlog priority is only
approximated; every job still runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from tether.adapters.redis_streams.acknowledger import Acknowledger
from tether.adapters.redis_streams.connection import BlockingSession, RedisConnection
from tether.adapters.redis_streams.health import BACKOFF_CAP
from tether.adapters.redis_streams.reclaimer import UNSEEN_RETRY_START, HeldEntry, Reclaimer, lease_by_id
from tether.adapters.redis_streams.settings import StreamSettings
from tether.domain.errors import StorageUnavailable
from tether.domain.job import Job
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository


class StreamConsumer:
    """Reads this process's entries of the consumer group and leases their jobs (see the module
    docstring).

    Args:
        settings: the dispatcher's settings (keys, group, consumer name).
        connection: where commands go (each reading thread has its own blocking session).
        acks: acknowledges and hands back entries.
        reclaimer: holds the entries whose job the repository cannot see yet.
        repository: where leases are taken.
        clock: supplies ``now`` for leases.

    Attributes:
        generation: bumped by every :meth:`wake`; a caller that saw it change stops waiting.
    """

    def __init__(
        self,
        settings: StreamSettings,
        connection: RedisConnection,
        acks: Acknowledger,
        reclaimer: Reclaimer,
        repository: JobRepository,
        clock: Clock,
    ) -> None:
        self._connection = connection
        self._acks = acks
        self._reclaimer = reclaimer
        self._repository = repository
        self._clock = clock
        self._keys = settings.keys
        self._group = settings.group
        self._consumer = settings.consumer
        self._lock = threading.Condition(threading.Lock())
        self.generation = 0
        self._blocked: dict[int, BlockingSession] = {}

    # -- reading ---------------------------------------------------------------------------------
    def read(self, streams: Sequence[str], limit: int, wait: float, generation: int) -> list[tuple[str, str, Any]]:
        """XREADGROUP up to ``limit`` new entries per stream, blocking up to ``wait`` seconds (not
        at all if ``wait`` <= 0); nothing if a :meth:`wake` came after ``generation``.  Returns
        ``(stream, entry id, fields)`` triples.

        Raises:
            redis.RedisError: the read failed (NOGROUP included).
        """
        session = self._connection.session()
        block_ms = int(wait * 1000) if wait > 0 else None
        if block_ms is not None:
            block_ms = max(1, block_ms)
            session.ensure_id()
        key = id(session)
        with self._lock:
            if self.generation != generation:
                return []
            self._blocked[key] = session
        try:
            response = session.client.xreadgroup(
                self._group, self._consumer, {s: ">" for s in streams}, count=limit, block=block_ms
            )
        finally:
            with self._lock:
                self._blocked.pop(key, None)
        return list(read_entries(response))

    def take(self, entries: list[tuple[str, str, Any]], worker_id: str, limit: int, lease_timeout: float) -> list[Job]:
        """Turn entries into leases, acknowledge them, hold the unseen, hand back the extras.

        Per stream, the first ``k`` entries (``k`` = what is left of ``limit``) cost one fenced
        batch lease, ``repository.lease(queues=[that queue], limit=k)``, which takes the best ``k``
        due jobs of the queue in lease order (so priority is honoured) in one statement.  When it
        returns ``k`` jobs, the ``k`` entries are spent.  When it returns fewer, the queue has no
        more due jobs; each entry whose own job was not among them is then checked by id
        (:func:`~tether.adapters.redis_streams.reclaimer.lease_by_id`, which also catches a job
        that became visible meanwhile): an id the repository cannot see yet is held for a retry,
        any other outcome is acknowledged.

        Why an entry may lease another job of its queue: every due job that was published has an
        entry, each entry spends at most one lease, and a lease only takes due queued/retrying jobs;
        so a job whose entry was spent on another job is matched by that other job's entry, and
        anything left over (a lost or trimmed entry) is the sweep's.  Batching makes Redis
        dispatch drain as fast as polling on SQL repositories, where one lease per id would cost a
        statement per job.

        Raises:
            StorageUnavailable: the repository could not be reached and nothing was leased (the
                entries read stay pending here and are retried).
        """
        acknowledger = self._acks
        leased: list[Job] = []
        acks: dict[str, list[str]] = {}
        handback: list[tuple[str, str, int]] = []
        held: list[HeldEntry] = []
        now = self._clock.now()
        failure: StorageUnavailable | None = None
        started = time.monotonic()
        by_stream: dict[str, list[tuple[str, int]]] = {}
        for stream, entry_id, fields in entries:
            job_id = job_id_of(fields)
            if job_id is None:
                acks.setdefault(stream, []).append(entry_id)  # malformed: nothing to do but ack
            elif acknowledger.debts and acknowledger.pays_debt(stream, job_id):
                acks.setdefault(stream, []).append(entry_id)  # its job was leased without it
            else:
                by_stream.setdefault(stream, []).append((entry_id, job_id))
        for stream, items in by_stream.items():
            budget = limit - len(leased)
            take, extra = items[: max(budget, 0)], items[max(budget, 0) :]
            handback.extend((stream, entry_id, job_id) for entry_id, job_id in extra)
            if not take:
                continue
            if failure is None:
                try:
                    jobs = self._repository.lease(
                        queues=[self._keys.queue_of(stream)], worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=len(take)
                    )
                except StorageUnavailable as exc:
                    failure = exc
            if failure is not None:
                held.extend(HeldEntry(stream, e, j, started, started + BACKOFF_CAP) for e, j in take)
                continue
            leased.extend(jobs)
            if len(jobs) == len(take):
                acks.setdefault(stream, []).extend(e for e, _ in take)
                continue
            got = {job.id for job in jobs}
            for entry_id, job_id in take:
                if job_id in got:
                    acks.setdefault(stream, []).append(entry_id)
                    continue
                if len(leased) >= limit:
                    handback.append((stream, entry_id, job_id))
                    continue
                try:
                    outcome = lease_by_id(self._repository, job_id, worker_id, now, lease_timeout)
                except StorageUnavailable as exc:
                    failure = exc
                    held.append(HeldEntry(stream, entry_id, job_id, started, started + BACKOFF_CAP))
                    continue
                if isinstance(outcome, Job):
                    leased.append(outcome)
                    acks.setdefault(stream, []).append(entry_id)
                elif outcome == "unseen":
                    held.append(HeldEntry(stream, entry_id, job_id, started, started + UNSEEN_RETRY_START))
                else:
                    acks.setdefault(stream, []).append(entry_id)
        if held:
            self._reclaimer.hold(held)
        acknowledger.finish(acks, handback, defer=bool(leased))
        if failure is not None and not leased:
            raise failure
        return leased

    # -- waiting and waking ----------------------------------------------------------------------
    def sleep(self, seconds: float, generation: int) -> None:
        """Wait up to ``seconds``, ending early at a :meth:`wake` after ``generation`` or at close."""
        if seconds <= 0:
            return
        with self._lock:
            self._lock.wait_for(lambda: self.generation != generation or self._connection.closed, timeout=seconds)

    def wake(self) -> None:
        """End every :meth:`sleep` and blocked :meth:`read` soon (``CLIENT UNBLOCK`` on their connections)."""
        with self._lock:
            self.generation += 1
            self._lock.notify_all()
            blocked = list(self._blocked.values())
        for session in blocked:
            session.unblock()


def job_id_of(fields: Any) -> int | None:
    """The positive job id an entry's fields name (``{"id": "<job id>"}``), or None if malformed."""
    if not isinstance(fields, dict):
        return None
    raw = fields.get("id")
    try:
        job_id = int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return job_id if job_id > 0 else None


def read_entries(response: Any) -> Iterable[tuple[str, str, Any]]:
    """Flatten an XREADGROUP reply (RESP2 list or RESP3 dict) to (stream, entry id, fields)."""
    if not response:
        return
    pairs = response.items() if isinstance(response, dict) else response
    for stream, messages in pairs:
        if isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], list) and messages[0] and isinstance(messages[0][0], (list, tuple)):
            messages = messages[0]  # RESP3 shape: {stream: [[entries]]}
        for message in messages or ():
            if not message:
                continue
            entry_id, fields = message[0], message[1]
            yield str(stream), str(entry_id), fields


__all__ = ["StreamConsumer", "job_id_of", "read_entries"]
