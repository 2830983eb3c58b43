"""What a queue holds right now, for gauges and overviews: :class:`QueueSummary`."""

from __future__ import annotations

from datetime import datetime

import attrs


@attrs.frozen
class QueueSummary:
    """The live jobs of one queue at one instant (the finished ones are not counted: on a large
    table only the live statuses have indexes that make an exact count cheap).

    Attributes:
        queue: the queue's name.
        queued, running, retrying: jobs in each live status (due or not).
        oldest_due_at: ``scheduled_at`` of its longest-waiting due job (``queued`` or
            ``retrying``, ``scheduled_at <= now``; aware UTC), or None when none is due.
    """

    queue: str
    queued: int = 0
    running: int = 0
    retrying: int = 0
    oldest_due_at: datetime | None = None

    def latency(self, now: datetime) -> float:
        """Seconds the oldest due job has waited past its due time at ``now`` (>= 0; 0 when none
        is due): how far the queue's workers are behind."""
        if self.oldest_due_at is None:
            return 0.0
        return max((now - self.oldest_due_at).total_seconds(), 0.0)


__all__ = ["QueueSummary"]
