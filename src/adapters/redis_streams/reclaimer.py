"""Pending entries: stream entries delivered but not yet acknowledged, and how each one ends
acknowledged.

* **Held entries** (:class:`HeldEntry`): an id the repository cannot see *yet* (a reader racing
  the producer's commit, or replica lag) is transient.  Its entry stays pending under this
  consumer and is tried again by id (:func:`lease_by_id`) with a short backoff (10 ms doubling to
  1 s) for up to ``claim_idle`` seconds, after which it is acknowledged: a job that never became
  visible was rolled back or purged, and one that did is covered by the sweep.  Entries read while
  the repository was unreachable are held the same way and tried again after 1 s
  (:meth:`Reclaimer.retry`, which ``acquire`` calls before reading anything new).
* **Entries of dead consumers** (:meth:`Reclaimer.reclaim_once`, at the start of every sweep pass):
  ``XAUTOCLAIM <stream> <group> <consumer> <claim_idle ms> 0-0 COUNT 100`` moves entries idle
  longer than ``claim_idle`` to this consumer, which acknowledges them; ids of entries whose
  message was trimmed or deleted (reported by Redis 7) are acknowledged too.  The claimed job is
  *not* run on the strength of the stream: stream idle time is never a lease.  If the job is still
  due, the sweep right after publishes it again; if it runs under a valid lease, the repository
  refuses a second lease; if that lease expires, the reaper returns the job and the sweep
  publishes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs
import redis
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.redis_streams.acknowledger import Acknowledger
from tether.adapters.redis_streams.connection import RedisConnection
from tether.adapters.redis_streams.health import BACKOFF_CAP, is_nogroup
from tether.adapters.redis_streams.settings import StreamSettings
from tether.domain.errors import JobNotFound, StorageUnavailable
from tether.domain.job import Job
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

#: Retry of an id the repository cannot see yet: starts here, doubles, capped at 1 s (seconds).
UNSEEN_RETRY_START = 0.01
#: At most this many pending entries are claimed per stream per pass (XAUTOCLAIM COUNT x rounds).
CLAIM_COUNT, CLAIM_ROUNDS = 100, 10


@attrs.define
class HeldEntry:
    """A stream entry delivered to this consumer and deliberately left unacknowledged, to retry."""

    stream: str
    entry_id: str
    job_id: int
    first_seen: float  # time.monotonic()
    next_try: float
    tries: int = 0


def lease_by_id(repository: JobRepository, job_id: int, worker_id: str, now: datetime, lease_timeout: float) -> Job | str:
    """Lease the job an entry names: the leased Job, ``"unseen"`` (the repository has no such id
    yet) or ``"skip"`` (taken, finished or not due: the repository said no, and it is the truth).

    Raises:
        StorageUnavailable: the repository could not be reached.
    """
    job = repository.lease_job(job_id, worker_id=worker_id, now=now, lease_timeout=lease_timeout)
    if job is not None:
        return job
    try:
        repository.get(job_id)
    except JobNotFound:
        return "unseen"
    return "skip"


class Reclaimer:
    """Keeps this consumer's held entries and claims the entries of dead consumers (see the module
    docstring).

    Args:
        settings: the dispatcher's settings (keys, group, consumer name: claimed entries move to
            it; ``claim_idle``).
        connection: where commands go.
        acks: acknowledges what ends here.
        repository: where held entries' jobs are leased by id.
        clock: supplies ``now`` for those leases.
        limited_log: the dispatcher's rate-limited log (key ``"unseen"``).
    """

    def __init__(
        self,
        settings: StreamSettings,
        connection: RedisConnection,
        acks: Acknowledger,
        repository: JobRepository,
        clock: Clock,
        limited_log: RateLimitedLog,
    ) -> None:
        self._connection = connection
        self._acks = acks
        self._repository = repository
        self._clock = clock
        self._keys = settings.keys
        self._group = settings.group
        self._consumer = settings.consumer
        self._claim_idle = settings.claim_idle
        self._log_limited = limited_log
        self._lock = threading.Lock()
        self._held: list[HeldEntry] = []

    # -- held entries ----------------------------------------------------------------------------
    def hold(self, entries: Sequence[HeldEntry]) -> None:
        """Keep ``entries`` pending under this consumer, to be tried again by :meth:`retry`."""
        with self._lock:
            self._held.extend(entries)

    def next_try(self) -> float:
        """:func:`time.monotonic` time of the earliest held entry's next try, or infinity."""
        with self._lock:
            return min((h.next_try for h in self._held), default=float("inf"))

    def retry(self, names: Sequence[str] | None, worker_id: str, limit: int, lease_timeout: float) -> list[Job]:
        """Try up to ``limit`` held entries of ``names``' streams (all if None) that are due a try:
        the jobs leased, each entry acknowledged unless its id is still unseen and young.

        Raises:
            StorageUnavailable: the repository could not be reached and nothing was leased (the
                entries stay held).
        """
        now_m = time.monotonic()
        with self._lock:
            if not self._held:
                return []
            wanted = None if names is None else {self._keys.stream(q) for q in names}
            ready = [h for h in self._held if h.next_try <= now_m and (wanted is None or h.stream in wanted)]
            ready = ready[:limit]
            for h in ready:
                self._held.remove(h)
        if not ready:
            return []
        leased: list[Job] = []
        acks: dict[str, list[str]] = {}
        keep: list[HeldEntry] = []
        now = self._clock.now()
        failure: StorageUnavailable | None = None
        for h in ready:
            if failure is not None:
                keep.append(h)
                continue
            try:
                outcome = lease_by_id(self._repository, h.job_id, worker_id, now, lease_timeout)
            except StorageUnavailable as exc:
                failure = exc
                h.next_try = now_m + BACKOFF_CAP
                keep.append(h)
                continue
            if isinstance(outcome, Job):
                leased.append(outcome)
            elif outcome == "unseen" and now_m - h.first_seen < self._claim_idle:
                h.tries += 1
                h.next_try = now_m + min(BACKOFF_CAP, UNSEEN_RETRY_START * 2**h.tries)
                keep.append(h)
                continue
            elif outcome == "unseen":
                self._log_limited(
                    "unseen",
                    logging.INFO,
                    "job %d was published but never became visible in %.0fs (rolled back or purged?); acknowledged",
                    h.job_id,
                    self._claim_idle,
                )
            acks.setdefault(h.stream, []).append(h.entry_id)
        if keep:
            self.hold(keep)
        self._acks.finish(acks, [], defer=bool(leased))
        if failure is not None and not leased:
            raise failure
        return leased

    # -- entries of dead consumers ---------------------------------------------------------------
    def reclaim_once(self, queues: Iterable[str]) -> int:
        """XAUTOCLAIM the entries of ``queues``' streams idle longer than ``claim_idle`` (and the
        ids of deleted ones) and XACK them; returns how many were acknowledged.

        Raises:
            redis.RedisError: any error but NOGROUP (a stream without its group has nothing pending).
        """
        idle_ms = max(0, int(self._claim_idle * 1000))
        acknowledged = 0
        for queue in sorted(queues):
            stream = self._keys.stream(queue)
            start = "0-0"
            for _ in range(CLAIM_ROUNDS):
                try:
                    reply = self._connection.client.xautoclaim(stream, self._group, self._consumer, idle_ms, start, count=CLAIM_COUNT)
                except redis.ResponseError as exc:
                    if is_nogroup(exc):
                        break  # no group (yet, or lost): nothing pending
                    raise
                claimed, next_start, deleted = autoclaim_parts(reply)
                stale = [*claimed, *deleted]
                if stale:
                    self._connection.client.xack(stream, self._group, *stale)
                    acknowledged += len(stale)
                    with self._lock:
                        gone = set(stale)
                        self._held = [h for h in self._held if not (h.stream == stream and h.entry_id in gone)]
                if next_start in (None, "0-0"):
                    break
                start = next_start
        return acknowledged


def autoclaim_parts(reply: Any) -> tuple[list[str], str | None, list[str]]:
    """(claimed entry ids, next start id, deleted entry ids) of an XAUTOCLAIM reply
    ``[next, [(id, fields) | None, ...], [deleted id, ...]]`` (the third part exists from Redis 7)."""
    if not isinstance(reply, (list, tuple)) or len(reply) < 2:
        return [], None, []
    claimed = [str(m[0]) for m in (reply[1] or []) if m]
    deleted = [str(x) for x in reply[2]] if len(reply) > 2 and reply[2] else []
    return claimed, str(reply[0]), deleted


__all__ = ["CLAIM_COUNT", "CLAIM_ROUNDS", "UNSEEN_RETRY_START", "HeldEntry", "Reclaimer", "autoclaim_parts", "lease_by_id"]
