"""Redis Streams dispatch: jobs start within milliseconds of their commit, and no job depends on Redis
to be found.

:class:`RedisStreamsDispatcher` (:mod:`.dispatcher`) implements the Dispatcher port; its keys are
laid out by :mod:`.keys`, and on a Redis Cluster :mod:`.cluster` finds the master it talks to.
"""

from tether.adapters.redis_streams.dispatcher import (
    MIN_REDIS_VERSION,
    BlockingSession,
    HeldEntry,
    RedisStreamsDispatcher,
    check_server_version,
    default_consumer_name,
    parse_version,
)
from tether.adapters.redis_streams.keys import StreamKeys

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
