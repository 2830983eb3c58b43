"""The repository state machine on SQLite: every history runs on a fresh database file.

Same rules and invariants as on memory (tether.testing.statemachine), checked against the pure
model after every step; a smaller budget, because each step is a real SQLite transaction.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from tether.adapters.sqlalchemy import SqliteJobRepository
from tether.ports.repository import JobRepository
from tether.testing.statemachine import DEFAULT_SETTINGS, RepositoryStateMachine

from tests.property.scratch_sqlite import close_scratch_sqlite, open_scratch_sqlite

pytestmark = pytest.mark.slow


class SqliteMachine(RepositoryStateMachine):
    limited_queues_last = True  # the limited queues' leases follow the plain lease
    #: 25 histories of up to 40 steps.
    hypothesis_settings = settings(DEFAULT_SETTINGS, max_examples=25)

    def make_repository(self) -> JobRepository:
        return open_scratch_sqlite("tether-machine-")

    def close_repository(self, repository: JobRepository) -> None:
        assert isinstance(repository, SqliteJobRepository)
        close_scratch_sqlite(repository)


TestSqliteAgainstModel = SqliteMachine.test_case()
