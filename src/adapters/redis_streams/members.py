"""The consumers of the group: this process's own leaves at a clean stop, and consumers left behind by
processes long gone are pruned, so the group's consumer list does not grow with every restart.

Consumer names are unique per process start (:func:`~.settings.default_consumer_name`), and Redis
keeps a consumer until it is deleted, so without this every worker that ever ran would stay listed.

* **Leaving** (:meth:`GroupMembers.leave`, from the dispatcher's ``close``): once its
  acknowledgements are flushed, this process deletes its consumer from each stream's group where it
  has no pending entry (``XGROUP DELCONSUMER``).  A consumer that still has entries pending (ids
  held for a retry) stays: another process claims those entries after ``claim_idle``, and the prune
  below deletes the consumer later.
* **Pruning** (:meth:`GroupMembers.prune_once`; :meth:`GroupMembers.maybe_prune` from a sweep
  pass, at most once per :data:`PRUNE_INTERVAL` per process): consumers with nothing pending that
  have been idle for more than :data:`CONSUMER_IDLE_LIMIT` seconds are deleted.  A live worker reads
  its streams at least every ``block`` seconds, so it is never that idle; and one deleted all the
  same would only be created again by its next read, having lost nothing, since it had nothing pending.

Every deletion is one script (:data:`LEAVE_SCRIPT`) that checks, atomically, that the consumer has
no pending entry (and has been idle long enough) before deleting it: an entry delivered to it a
moment earlier is never dropped from the group's pending list.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

import redis
from tether.adapters.redis_streams.connection import RedisConnection
from tether.adapters.redis_streams.settings import StreamSettings

log = logging.getLogger("tether.dispatch.redis")

#: Consumers idle for longer than this (seconds) with nothing pending are deleted by the prune.
CONSUMER_IDLE_LIMIT = 3600.0
#: A process prunes at most once per this many seconds (from its sweep passes).
PRUNE_INTERVAL = 60.0
#: KEYS[1]: a stream; ARGV[1]: the group; ARGV[2]: a consumer; ARGV[3]: the least idle time in ms.
#: Deletes the consumer from the group when it has no pending entry and has been idle at least that
#: long; returns 1 when it deleted it, else 0 (also when the stream, group or consumer is missing).
LEAVE_SCRIPT = """
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
for _, consumer in ipairs(consumers) do
  local fields = {}
  for i = 1, #consumer, 2 do fields[consumer[i]] = consumer[i + 1] end
  if fields['name'] == ARGV[2] then
    if fields['pending'] == 0 and fields['idle'] >= tonumber(ARGV[3]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
"""


class GroupMembers:
    """Deletes consumers of the group that are no longer needed (see the module docstring).

    Args:
        settings: the dispatcher's settings (keys, group, this process's consumer name).
        connection: where commands go.
    """

    def __init__(self, settings: StreamSettings, connection: RedisConnection) -> None:
        self._connection = connection
        self._keys = settings.keys
        self._group = settings.group
        self._consumer = settings.consumer
        self._script = connection.client.register_script(LEAVE_SCRIPT)  # always called with client=<pipeline>
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def leave(self, queues: Iterable[str]) -> int:
        """Delete this process's consumer from the group of each queue's stream where it has
        nothing pending; returns how many it was deleted from.  Never raises (a failure is logged:
        the prune deletes the consumer later)."""
        streams = [self._keys.stream(queue) for queue in sorted(queues)]
        if not streams:
            return 0
        try:
            pipe = self._connection.client.pipeline(transaction=False)
            for stream in streams:
                self._script(keys=[stream], args=[self._group, self._consumer, 0], client=pipe)
            left = sum(1 for answer in pipe.execute(raise_on_error=False) if answer == 1)
        except redis.RedisError as exc:
            log.info("consumer %s could not leave the group at close (%s); it will be pruned later", self._consumer, exc)
            return 0
        log.debug("consumer %s left the group of %d of %d stream(s)", self._consumer, left, len(streams))
        return left

    def maybe_prune(self, queues: Iterable[str]) -> list[tuple[str, str]] | None:
        """From a sweep pass: :meth:`prune_once`, unless this process pruned less than
        :data:`PRUNE_INTERVAL` seconds ago (then None).

        Raises:
            redis.RedisError: a command failed.
        """
        now = time.monotonic()
        with self._lock:
            if now < self._next_prune:
                return None
            self._next_prune = now + PRUNE_INTERVAL
        return self.prune_once(queues)

    def prune_once(self, queues: Iterable[str]) -> list[tuple[str, str]]:
        """Delete the consumers of each queue's stream that have nothing pending and have been idle
        for more than :data:`CONSUMER_IDLE_LIMIT` seconds; returns ``(stream, consumer)`` of each
        one deleted.

        Raises:
            redis.RedisError: a command failed (a stream without the group is skipped).
        """
        streams = [self._keys.stream(queue) for queue in sorted(queues)]
        if not streams:
            return []
        limit_ms = int(CONSUMER_IDLE_LIMIT * 1000)
        pipe = self._connection.client.pipeline(transaction=False)
        for stream in streams:
            pipe.xinfo_consumers(stream, self._group)
        candidates: list[tuple[str, str]] = []
        for stream, consumers in zip(streams, pipe.execute(raise_on_error=False)):
            if isinstance(consumers, Exception):
                continue  # no stream, or no group yet
            for consumer in consumers:
                if consumer.get("pending") == 0 and int(consumer.get("idle") or 0) > limit_ms:
                    candidates.append((stream, str(consumer.get("name"))))
        if not candidates:
            return []
        pipe = self._connection.client.pipeline(transaction=False)
        for stream, name in candidates:
            self._script(keys=[stream], args=[self._group, name, limit_ms + 1], client=pipe)
        pruned = [candidate for candidate, answer in zip(candidates, pipe.execute()) if answer == 1]
        if pruned:
            log.info("pruned %d consumer(s) idle for over %.0f s with nothing pending: %s", len(pruned),
                     CONSUMER_IDLE_LIMIT, ", ".join(sorted({name for _, name in pruned}))[:500])
        return pruned


__all__ = ["CONSUMER_IDLE_LIMIT", "LEAVE_SCRIPT", "PRUNE_INTERVAL", "GroupMembers"]
