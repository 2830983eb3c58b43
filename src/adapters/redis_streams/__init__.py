"""Redis Streams dispatch: jobs start within milliseconds of their commit, and no job depends on Redis
to be found.

The repository is the source of truth; Redis only carries "look at job N".  How the parts fit, in
the order a job meets them:

* **Publish after commit** (:mod:`.publisher`): ``notify`` XADDs each due job's id to its queue's
  stream (one stream per queue, every key under the prefix's hash tag: :mod:`.keys`); a job due
  later waits on a local timer.  A failed publish is logged and left to the sweep.
* **Consumer group** (:mod:`.consumer`): one group per application, consumer names unique per
  process start; ``XREADGROUP BLOCK`` reads the entries of a worker's queues.
* **Lease in the repository**: each entry buys at most one fenced lease there (a batch lease per
  stream, or a lease by id); stream delivery or idle time is never a lease.
* **XACK in every outcome** (:mod:`.acknowledger`): leased, already taken, finished, not due or
  malformed, every entry is acknowledged, the leased ones from a background thread; only an id
  the repository cannot see yet is held pending and retried (:mod:`.reclaimer`).
* **Reclaim** (:mod:`.reclaimer`): ``XAUTOCLAIM`` takes over and acknowledges the entries left
  pending by dead consumers.
* **Sweep** (:mod:`.sweeper`): one process per interval re-publishes the due jobs nobody took, so a
  lost, trimmed or reclaimed entry costs latency, never a job.
* **Group members** (:mod:`.members`): a process that closes cleanly deletes its consumer where it
  has nothing pending, and consumers idle for an hour with nothing pending are pruned, so the
  group does not keep one consumer per process ever started.
* **Degraded mode** (:mod:`.health`): after a Redis error the dispatcher backs off with a
  rate-limited log; meanwhile workers lease straight from the database and ``notify`` skips
  publishing.  ``NOGROUP`` recreates the group; on a Redis Cluster (:mod:`.cluster`) the master
  that owns the prefix's slot is found again.

:class:`RedisStreamsDispatcher` (:mod:`.dispatcher`) implements the Dispatcher port by wiring these
parts over one :class:`~.connection.RedisConnection` and one :class:`~.settings.StreamSettings`.
Requires Redis >= 6.2 (``XAUTOCLAIM``).
"""

from tether.adapters.redis_streams.connection import BlockingSession
from tether.adapters.redis_streams.dispatcher import RedisStreamsDispatcher
from tether.adapters.redis_streams.health import MIN_REDIS_VERSION, check_server_version, parse_version
from tether.adapters.redis_streams.keys import StreamKeys
from tether.adapters.redis_streams.reclaimer import HeldEntry
from tether.adapters.redis_streams.settings import default_consumer_name

__all__ = [
    "MIN_REDIS_VERSION",
    "BlockingSession",
    "HeldEntry",
    "RedisStreamsDispatcher",
    "StreamKeys",
    "check_server_version",
    "default_consumer_name",
    "parse_version",
]
