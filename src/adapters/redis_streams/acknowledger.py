"""Acknowledgements: every stream entry the Redis Streams dispatcher reads is acknowledged (XACK),
whatever became of its job.

* An entry is acknowledged when its job was leased, was already taken, finished or not due, and
  when the entry is malformed: the repository answered, and it is the truth.  The one exception
  is an id the repository cannot see yet, held for a retry by :mod:`.reclaimer`.
* Entries read beyond what the worker asked for (``COUNT`` applies per stream) are handed back:
  re-added to their stream and acknowledged, in the same pipeline (:meth:`Acknowledger.finish`).
* The entries of leased jobs are acknowledged by a background thread (``tether-redis-acker``),
  which waits :data:`ACK_COALESCE` seconds after being woken to gather the next few leases' entries
  into one round trip, so a worker gets its jobs without waiting for an XACK.  That is safe: the
  jobs are leased in the repository already, and an entry left pending because this process died
  is claimed and acknowledged by another one after ``claim_idle``.
* Debts: a job leased straight from the repository (backlog mode, a worker pool's refills) spent
  no entry, although its queue's stream holds one for it.  :meth:`Acknowledger.owe` records it;
  the same thread then retires one entry of that queue per such job, server-side
  (:data:`RETIRE_SCRIPT` reads and acknowledges without sending the entries to the client), and an
  entry that a consumer reads naming an owed job is acknowledged as that debt
  (:meth:`Acknowledger.pays_debt`).  Only what is there now is retired: a debt with no entry to
  retire is dropped, never carried over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import redis
from tether.adapters.redis_streams.connection import RedisConnection
from tether.adapters.redis_streams.health import RedisHealth
from tether.adapters.redis_streams.settings import StreamSettings
from tether.domain.job import Job

#: The background acknowledger waits this long (seconds) after being woken, to batch its XACKs.
ACK_COALESCE = 0.01
#: Reads up to ARGV[3] new entries of the stream KEYS[1] for group ARGV[1] as consumer ARGV[2] and
#: acknowledges them at once; returns how many.  Retires the entries owed by jobs leased without
#: one (see :meth:`Acknowledger.owe`) without sending them to the client.
RETIRE_SCRIPT = """
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], '>')
if not reply then return 0 end
local entries = reply[1][2]
local ids = {}
for i = 1, #entries do ids[#ids + 1] = entries[i][1] end
if #ids > 0 then redis.call('XACK', KEYS[1], ARGV[1], unpack(ids)) end
return #ids
"""


class Acknowledger:
    """Acknowledges entries, now or from its background thread, and retires owed entries.

    Args:
        settings: the dispatcher's settings (keys, group, consumer name, ``maxlen`` of handed-back entries).
        connection: where commands go.
        health: records Redis errors (unacknowledged entries stay pending and are reclaimed later).

    Attributes:
        debts: queue -> ids of the jobs leased without spending an entry, in order (read without
            the lock as a cheap "anything owed?" check on the consumer's path).
    """

    def __init__(self, settings: StreamSettings, connection: RedisConnection, health: RedisHealth) -> None:
        self._connection = connection
        self._health = health
        self._keys = settings.keys
        self._group = settings.group
        self._consumer = settings.consumer
        self._maxlen = settings.maxlen
        self._retire = connection.client.register_script(RETIRE_SCRIPT)  # always called with client=<pipeline>
        self._lock = threading.Lock()
        self._deferred: dict[str, list[str]] = {}
        self.debts: dict[str, dict[int, None]] = {}
        self._wanted = threading.Event()
        self._thread: threading.Thread | None = None

    def finish(self, acks: dict[str, list[str]], handback: list[tuple[str, str, int]], *, defer: bool = False) -> None:
        """Hand back the extras ``(stream, entry id, job id)`` (re-add, then ack) and acknowledge
        ``acks`` (stream -> entry ids), in one pipeline.  With ``defer`` (and nothing to hand back)
        the background thread sends the acknowledgements, batched with others.  Redis errors are
        recorded by :mod:`.health`, never raised: unacknowledged entries stay pending, and the
        sweep's reclaim acknowledges them later."""
        if defer and not handback:
            with self._lock:
                for stream, ids in acks.items():
                    self._deferred.setdefault(stream, []).extend(ids)
            self._wake()
            return
        if not acks and not handback:
            return
        try:
            pipe = self._connection.client.pipeline(transaction=False)
            for stream, job_entry, job_id in handback:
                pipe.xadd(stream, {"id": job_id}, maxlen=self._maxlen, approximate=True)
                acks.setdefault(stream, []).append(job_entry)
            for stream, ids in acks.items():
                pipe.xack(stream, self._group, *ids)
            pipe.execute()
        except redis.RedisError as exc:
            self._health.record_failure(exc)

    def flush(self) -> None:
        """Send the deferred acknowledgements now (from the caller's thread)."""
        with self._lock:
            if not self._deferred:
                return
            acks, self._deferred = self._deferred, {}
        self.finish(acks, [])

    def owe(self, jobs: Sequence[Job]) -> None:
        """Jobs leased straight from the repository: retire as many entries of their queues' streams
        in the background (one entry buys one lease)."""
        with self._lock:
            for job in jobs:
                self.debts.setdefault(job.queue, {})[job.id] = None
        self._wake()

    def pays_debt(self, stream: str, job_id: int) -> bool:
        """True (and the debt is settled) when ``job_id`` was leased without spending an entry and
        this entry of its queue is its own: acknowledging it is that lease's entry, no lease by id."""
        queue = self._keys.queue_of(stream)
        with self._lock:
            owed = self.debts.get(queue)
            if owed is None or job_id not in owed:
                return False
            del owed[job_id]
            if not owed:
                del self.debts[queue]
            return True

    def stop(self) -> None:
        """End the background thread (after the connection was marked closed), waiting up to 5 s."""
        self._wanted.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _wake(self) -> None:
        """Start the background thread on first use, and wake it."""
        with self._lock:
            # started on first use; started again should it have died (the loop survives any
            # exception, so only something outside Python's control could end it)
            if (self._thread is None or not self._thread.is_alive()) and not self._connection.closed:
                self._thread = threading.Thread(target=self._loop, name="tether-redis-acker", daemon=True)
                self._thread.start()
        self._wanted.set()

    def _loop(self) -> None:
        while not self._connection.closed:
            self._wanted.wait()
            if not self._connection.closed:
                time.sleep(ACK_COALESCE)  # gather what the next few leases add: one round trip for all
            self._wanted.clear()
            try:
                self.flush()
                self._retire_debts()
            except BaseException as exc:  # noqa: BLE001 - the thread outlives anything; entries stay pending
                self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        """An error other than Redis's in a pass: recorded like a Redis failure (the entries stay
        pending and are reclaimed later); never raises."""
        try:
            self._health.record_failure(exc)
        except BaseException:  # noqa: BLE001, S110 - health bookkeeping never ends the thread
            pass

    def _retire_debts(self) -> None:
        """Read (without blocking) and acknowledge one entry per job leased without spending one,
        server-side: one :data:`RETIRE_SCRIPT` call per queue in one pipeline, so a draining worker
        parses no entries."""
        with self._lock:
            if not self.debts:
                return
            debts, self.debts = self.debts, {}
        try:
            pipe = self._connection.client.pipeline(transaction=False)
            for queue in sorted(debts):
                self._retire(keys=[self._keys.stream(queue)], args=[self._group, self._consumer, len(debts[queue])],
                             client=pipe)
            pipe.execute(raise_on_error=False)  # NOGROUP and the like: nothing to retire there
        except redis.RedisError as exc:
            self._health.record_failure(exc)


__all__ = ["ACK_COALESCE", "RETIRE_SCRIPT", "Acknowledger"]
