"""The dispatcher port: how workers learn there is work, and get leases for it.

The repository is the truth; a dispatcher only says "look at job N" or "there is work" and turns
that into leases through the repository.  Delivery never depends on a notification: a lost one
costs latency (one poll or sweep interval), never a job.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from tether.domain.job import Job
from tether.ports.repository import JobRepository


@runtime_checkable
class Dispatcher(Protocol):
    """Hands leased jobs to workers.

    A dispatcher may name how it works in a ``kind`` class attribute (``"polling"``, ``"listen"``, ``"redis"``):
    worker pools record it in the worker registry (else their dispatcher's class name).

    A dispatcher whose :meth:`notify` does no I/O (only wakes threads of this process) says so
    with a ``notify_blocks = False`` class attribute: the async API then calls it on the caller's
    event loop instead of handing it to a thread (default, when absent: it blocks).
    """

    def notify(self, jobs: Sequence[Job]) -> None:
        """Tell workers these jobs were committed.  Called after commit; never raises (failures
        are logged and left to the sweep or poll)."""
        ...

    def acquire(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int,
        lease_timeout: float,
        max_wait: float,
        listed_order: bool = False,
    ) -> list[Job]:
        """Block up to ``max_wait`` seconds for work; return up to ``limit`` jobs leased to
        ``worker_id`` for ``lease_timeout`` seconds (possibly none).  ``listed_order``: prefer the
        ``queues`` in the order listed (see ``JobRepository.lease``); a worker pool serving several
        named queues rotates its list from one call to the next, so no queue starves another.

        A dispatcher that can lease by job type also takes ``job_types: Sequence[str] | None``
        (None: every type; else only jobs of those types, as ``JobRepository.lease`` does): a
        worker pool with both thread-run and ``async def`` handlers then asks each kind's types
        for that kind's free slots.  A worker pool passes it only to a dispatcher whose
        ``acquire`` takes it (polling and LISTEN do; Redis Streams does not, and its pools lease
        unfiltered).

        Raises:
            StorageUnavailable: the repository could not be reached (the caller backs off).
        """
        ...

    def leases_from(self, repository: JobRepository) -> bool:
        """True when a worker pool may lease from ``repository`` itself too, with
        :meth:`~tether.ports.repository.JobRepository.complete_and_lease`, refilling its threads
        in the statement that writes its completions; it then tells :meth:`leased_directly`
        which jobs it leased so.  True for polling (which only leases from the repository) and for
        Redis Streams on its own repository.  Default: False (always ask :meth:`acquire`).
        """
        return False

    def leased_directly(self, jobs: Sequence[Job]) -> None:
        """Told after a worker pool leased ``jobs`` from the repository itself (a completion flush's
        :meth:`~tether.ports.repository.JobRepository.complete_and_lease`, allowed by
        :meth:`leases_from`), not through :meth:`acquire`: a broker dispatcher retires as many of
        its messages so they do not buy a second lease later.  Must not raise or block for long.
        Default: nothing (polling keeps no messages)."""
        return

    def maintain(self, now: datetime) -> None:
        """Periodic upkeep (re-publishing due jobs, reclaiming pending entries); may do nothing."""
        ...

    def wake(self) -> None:
        """Make a blocked :meth:`acquire` return soon (used at shutdown)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
