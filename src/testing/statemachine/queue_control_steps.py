"""The queue-control steps of the repository state machine: set or lift a queue's limits in the store and the model alike.

A mixin of :class:`~tether.testing.statemachine.repository_machine.RepositoryStateMachine` (which
supplies the clock, the repository and the model).  It holds no rule: the limits ride on the lease
rule, so the machine's rules and its derandomized histories stay as they were.
"""

from __future__ import annotations

from typing import Any

from tether.testing.model import JobModel
from tether.testing.statemachine.base import QUEUES


class QueueControlSteps:
    """``_lift`` and ``_control``: one queue's running, rate and per-key limits, in both."""

    clock: Any
    repository: Any
    model: JobModel

    def _lift(self, queue: str) -> None:
        """Clear every limit of ``queue`` in the repository and the model."""
        now, repository, model = self.clock.now(), self.repository, self.model
        assert repository.set_queue_limit(queue, None, now=now).max_running is None
        assert repository.set_queue_rate(queue, None, None, now=now).rate_limit is None
        assert repository.set_queue_key_limit(queue, None, now=now).max_running_per_key is None
        model.set_limit(queue, None)
        model.set_rate(queue, None, None)
        model.set_key_limit(queue, None)

    def _control(self, queue: str, change: int | str | tuple[int, float] | tuple[str, int]) -> None:
        """Apply a lease's queue-control ``change`` to ``queue``: a running limit (an int), a rate
        limit (``(starts, per)``), a per-key running limit (``("per_key", n)``), or ``"clear"``
        (all lifted).  Limiting one queue lifts the other queues' limits (the store's order
        between several limited queues is its own, see ``limited_queues_last``)."""
        now, repository, model = self.clock.now(), self.repository, self.model
        if change != "clear":
            for other in QUEUES:
                if other != queue and model.limited(other):
                    self._lift(other)
        if isinstance(change, int):
            assert repository.set_queue_limit(queue, change, now=now).max_running == change
            model.set_limit(queue, change)
        elif isinstance(change, tuple) and change[0] == "per_key":
            assert repository.set_queue_key_limit(queue, int(change[1]), now=now).max_running_per_key == change[1]
            model.set_key_limit(queue, int(change[1]))
        elif isinstance(change, tuple):
            starts, per = change
            assert repository.set_queue_rate(queue, int(starts), float(per), now=now).rate_limit == starts
            model.set_rate(queue, int(starts), float(per))
        else:
            self._lift(queue)


__all__ = ["QueueControlSteps"]
