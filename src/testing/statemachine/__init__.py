"""Hypothesis state machines that drive a job repository through random histories.

:class:`RepositoryStateMachine` runs one repository against the pure model of
:mod:`tether.testing.model` and fails on the first step where they disagree.
:class:`AsyncApiStateMachine` drives an app's steps through the sync or the async API at random
and compares each answer with the same sync step on a twin app.
:class:`LockstepStateMachine` runs two repositories side by side (say memory and SQLite) and fails
on the first difference between them.  Both use a :class:`~tether.adapters.clock.FakeClock` that
the machine advances, so every time is exact.

The histories mix: enqueue (with and without idempotency keys, priorities, delays; one at a time,
in batches, and in transactions that roll back), leases by several workers (by queue filter and by
id), heartbeats, complete, fail (transient with a ``retry_at``, and permanent), dead letter,
release, snooze, writes with stale or foreign lease tokens, an operator's cancel (one job, or a
batch by queue), the reaper, manual retry of dead and cancelled jobs, and purge.

Checked after every step: at most one live lease per job; no token handed out twice; a stale-token
write raises LeaseLost and changes nothing; finished jobs (completed, dead, cancelled) stay
finished (only retry_dead and purge move them); a cancelled job is never leased or reaped again; attempts never exceed max_attempts; leases come in order priority DESC, scheduled_at
ASC, id ASC; and every job the repository holds equals the model's (status, attempts, times,
lease, error presence, payload).

Use on your own repository (Hypothesis and pytest required)::

    from hypothesis import settings
    from tether.testing.statemachine import DEFAULT_SETTINGS, RepositoryStateMachine

    class MyMachine(RepositoryStateMachine):
        hypothesis_settings = settings(DEFAULT_SETTINGS, max_examples=25)   # slow backend
        def make_repository(self):
            return MyJobRepository(...)        # fresh and empty for every example
        def close_repository(self, repository):
            repository.close()

    TestMyMachine = MyMachine.test_case()

Modules: :mod:`.base` (the budget, the random inputs, the settings plumbing),
:mod:`.repository_machine` (one repository against the model), :mod:`.lockstep` (two repositories
side by side).
"""

from __future__ import annotations

from tether.testing.statemachine.async_api_machine import AsyncApiStateMachine

# The budget and the inputs the machines draw (importable from here, as before the split).
from tether.testing.statemachine.base import DEFAULT_SETTINGS, LEASE_TIMEOUT
from tether.testing.statemachine.base import KEYS as KEYS
from tether.testing.statemachine.base import QUEUE_FILTERS as QUEUE_FILTERS
from tether.testing.statemachine.base import QUEUES as QUEUES
from tether.testing.statemachine.base import WORKERS as WORKERS
from tether.testing.statemachine.base import WRITES as WRITES
from tether.testing.statemachine.base import delays as delays
from tether.testing.statemachine.base import keys as keys
from tether.testing.statemachine.base import max_attempts as max_attempts
from tether.testing.statemachine.base import priorities as priorities
from tether.testing.statemachine.base import queues as queues
from tether.testing.statemachine.base import retry_delays as retry_delays
from tether.testing.statemachine.base import steps as steps
from tether.testing.statemachine.lockstep import LockstepStateMachine, lockstep_machine
from tether.testing.statemachine.lockstep import Outcome as Outcome
from tether.testing.statemachine.repository_machine import RepositoryStateMachine

__all__ = [
    "DEFAULT_SETTINGS",
    "LEASE_TIMEOUT",
    "AsyncApiStateMachine",
    "LockstepStateMachine",
    "RepositoryStateMachine",
    "lockstep_machine",
]
