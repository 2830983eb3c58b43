"""Redis key layout of the Redis Streams dispatcher, and the rules that keep keys safe.

Every key of one application shares a single Redis Cluster hash tag, the prefix in braces, so all
of them live in one hash slot (:attr:`StreamKeys.slot`, ``CRC16("{prefix}") mod 16384``): one
``XREADGROUP`` can then read all of a worker's queues, and one pipeline can touch several streams,
on a cluster as on a single server.  With ``cluster=True`` the dispatcher talks straight to the
master that owns that slot (:mod:`tether.adapters.redis_streams.cluster`).  The price is that one
application's dispatch traffic lands on one cluster node; dispatch messages are tiny (a job id),
so that node is rarely the bottleneck.  Applications that need to spread the load use several
prefixes (one per application), which land on different slots.

With the default prefix ``tether`` the keys are::

    {tether}:queue:<queue>     a stream per queue; each entry has one field, id = <job id>
    {tether}:queues            a set of the queue names ever published (consumers with queues=None read these)
    {tether}:swept:<job id>    a marker (SET NX PX) so the sweep re-publishes a job at most once per interval
    {tether}:sweep-lock        held for one sweep interval by whichever process runs the periodic sweep

Queue names are checked with :func:`tether.domain.validation.validate_queue` before they become part
of a key, and the prefix and group name with :func:`validate_name`, so no caller-supplied text can
smuggle a brace (another hash tag), a glob character or whitespace into a key.
"""

from __future__ import annotations

import re

from redis.crc import key_slot
from tether.domain import redaction
from tether.domain.errors import ValidationError
from tether.domain.validation import validate_queue

#: Prefix and consumer-group names: 1-64 of letters, digits, ``_ . : -``, starting with a letter or digit.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}")
#: Consumer names: 1-200 printable characters without whitespace.
CONSUMER_PATTERN = re.compile(r"[!-~]{1,200}")


def is_valid_queue(name: str) -> bool:
    """True if ``name`` is a valid queue name (:func:`~tether.domain.validation.validate_queue`),
    so usable in a stream key; for names read back from Redis, which anyone may have written."""
    try:
        validate_queue(name)
    except ValidationError:
        return False
    return True


def validate_name(value: object, field: str) -> str:
    """Return ``value`` if it matches :data:`NAME_PATTERN`, else raise ValidationError naming ``field``."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ValidationError(
            field, f"{value!r} is not usable in a Redis key (1-64 of letters, digits, '_', '.', ':', '-', starting with a letter or digit)"
        )
    return value


def validate_consumer(value: object) -> str:
    """Return ``value`` if it is 1-200 printable ASCII characters without spaces, else raise ValidationError."""
    if not isinstance(value, str) or not CONSUMER_PATTERN.fullmatch(value):
        raise ValidationError("consumer", f"{value!r:.80} must be 1-200 printable ASCII characters without spaces")
    return value


class StreamKeys:
    """Builds and parses the keys of one application (see the module docstring for the layout).

    Args:
        prefix: the application's key prefix (:data:`NAME_PATTERN`); it becomes the hash tag.

    Attributes:
        tag: ``{prefix}``, the Redis Cluster hash tag of every key.
        slot: the hash slot (0-16383) of every key, ``CRC16(prefix) mod 16384``.

    Raises:
        ValidationError: a bad prefix, or (from :meth:`stream`) a bad queue name.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = validate_name(prefix, "prefix")
        self.tag = "{" + self.prefix + "}"
        self.slot = key_slot(self.tag.encode())
        self.registry = f"{self.tag}:queues"
        self.sweep_lock = f"{self.tag}:sweep-lock"
        self._stream_head = f"{self.tag}:queue:"

    def stream(self, queue: str) -> str:
        """The stream key of ``queue``.

        Raises:
            ValidationError: ``queue`` is not a valid queue name (field ``queue``).
        """
        return self._stream_head + validate_queue(queue)

    def queue_of(self, stream: str) -> str:
        """The queue name a stream key was built from (inverse of :meth:`stream`).

        Raises:
            ValueError: ``stream`` is not a stream key of this prefix.
        """
        if not stream.startswith(self._stream_head):
            raise ValueError(f"{stream!r} is not a stream of prefix {self.prefix!r}")
        return stream[len(self._stream_head) :]

    def swept(self, job_id: int) -> str:
        """The once-per-interval sweep marker of one job."""
        return f"{self.tag}:swept:{int(job_id)}"

    def pattern(self) -> str:
        """A ``SCAN MATCH`` pattern covering every key of this prefix (tests use it to clean up)."""
        return self.tag + ":*"


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (in the authority and in a ``password=`` query
    parameter), for error messages and logs: :func:`tether.domain.redaction.redact_url`, with a lone
    userinfo (``redis://secret@host``) hidden too, since some clients read it as a password."""
    return redaction.redact_url(url, bare_userinfo_is_secret=True)


__all__ = [
    "CONSUMER_PATTERN",
    "NAME_PATTERN",
    "StreamKeys",
    "is_valid_queue",
    "redact_url",
    "validate_consumer",
    "validate_name",
]
