"""The repository state machines on the in-memory repository.

``TestMemoryAgainstModel`` checks every step against the pure model (tether.testing.model);
``TestMemoryLockstep`` drives two in-memory repositories side by side (the SQLite suite plugs
its own factory into ``lockstep_machine``).
"""

from __future__ import annotations

from tether.adapters.memory import InMemoryJobRepository
from tether.testing.statemachine import RepositoryStateMachine, lockstep_machine

TestMemoryAgainstModel = RepositoryStateMachine.test_case()

TestMemoryLockstep = lockstep_machine(InMemoryJobRepository, InMemoryJobRepository, name="MemoryLockstep").test_case()
