"""The Redis Streams dispatcher's settings, validated once and shared by its parts.

Every part (publisher, consumer, acknowledger, reclaimer, sweeper, health) reads the names and
numbers it needs from one :class:`StreamSettings`, built by :meth:`StreamSettings.validated`
from the dispatcher's keyword arguments, so each argument is checked in one place and an error
names the argument.
"""

from __future__ import annotations

import os
import re
import secrets
import socket

import attrs
from tether.adapters.redis_streams.keys import StreamKeys, validate_consumer, validate_name
from tether.domain.validation import validate_int, validate_seconds


def default_consumer_name() -> str:
    """``<hostname>-<pid>-<6 hex>``: unique per process start, so a restarted worker never inherits
    (or is confused with) the pending entries of its previous life."""
    host = re.sub(r"[^!-~]", "_", socket.gethostname() or "host")[:100]
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


@attrs.frozen
class StreamSettings:
    """What one dispatcher was configured with (see :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher`).

    Attributes:
        keys: the key layout of the prefix.
        group: the consumer group name (one per application).
        consumer: this process's consumer name in the group.
        block: the longest single ``XREADGROUP BLOCK``, in seconds (> 0).
        claim_idle: seconds an entry must sit unacknowledged before it is claimed from its
            (presumed dead) consumer; also how long an id the repository cannot see is retried (> 0).
        sweep_interval: seconds between sweeps, and the least time between two re-publications of
            one job (> 0).
        maxlen: approximate maximum entries per stream (``XADD MAXLEN ~``), 1 to 2**62.
    """

    keys: StreamKeys
    group: str
    consumer: str
    block: float
    claim_idle: float
    sweep_interval: float
    maxlen: int

    @classmethod
    def validated(
        cls,
        *,
        prefix: str,
        group: str,
        consumer: str | None,
        block: float,
        claim_idle: float,
        sweep_interval: float,
        maxlen: int,
    ) -> StreamSettings:
        """Check each argument (in this order) and build the settings; ``consumer=None`` gets
        :func:`default_consumer_name`.

        Raises:
            ValidationError: a bad prefix, group or consumer name, or a number out of range
                (naming the argument).
        """
        keys = StreamKeys(prefix)
        group = validate_name(group, "group")
        consumer = validate_consumer(consumer) if consumer is not None else default_consumer_name()
        return cls(
            keys=keys,
            group=group,
            consumer=consumer,
            block=validate_seconds(block, "block", allow_zero=False),
            claim_idle=validate_seconds(claim_idle, "claim_idle", allow_zero=False),
            sweep_interval=validate_seconds(sweep_interval, "sweep_interval", allow_zero=False),
            maxlen=validate_int(maxlen, "maxlen", 1, 2**62),
        )


__all__ = ["StreamSettings", "default_consumer_name"]
