"""Memory and SQLite in lockstep: the same random history on both, failing on the first difference.

Every call must return the same jobs (compared by enqueue order, since ids may differ) or raise
the same error, and after every step both stores must hold the same jobs with the same counts.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.sqlalchemy import SqliteJobRepository
from tether.ports.repository import JobRepository
from tether.testing.statemachine import DEFAULT_SETTINGS, LockstepStateMachine

from tests.property.scratch_sqlite import close_scratch_sqlite, open_scratch_sqlite

pytestmark = pytest.mark.slow


class MemoryVsSqlite(LockstepStateMachine):
    #: 25 histories of up to 40 steps.
    hypothesis_settings = settings(DEFAULT_SETTINGS, max_examples=25)

    def make_left(self) -> JobRepository:
        return InMemoryJobRepository()

    def make_right(self) -> JobRepository:
        return open_scratch_sqlite("tether-lockstep-")

    def close_repository(self, repository: JobRepository) -> None:
        if isinstance(repository, SqliteJobRepository):
            close_scratch_sqlite(repository)
        else:
            repository.close()


TestMemoryVsSqliteLockstep = MemoryVsSqlite.test_case()
