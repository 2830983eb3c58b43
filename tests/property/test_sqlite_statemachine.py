"""The repository state machine on SQLite: every history runs on a fresh database file.

Same rules and invariants as on memory (tether.testing.statemachine), checked against the pure
model after every step; a smaller budget, because each step is a real SQLite transaction.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from tether.adapters.sqlalchemy import SqliteJobRepository, open_repository
from tether.ports.repository import JobRepository
from tether.testing.statemachine import DEFAULT_SETTINGS, RepositoryStateMachine

pytestmark = pytest.mark.slow

#: Database files go to a RAM-backed directory when there is one: these tests check what the
#: repository does, not durability, and fsync on a disk would be most of their time.
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class SqliteMachine(RepositoryStateMachine):
    #: 25 histories of up to 40 steps.
    hypothesis_settings = settings(DEFAULT_SETTINGS, max_examples=25)

    def make_repository(self) -> JobRepository:
        self.directory = tempfile.mkdtemp(prefix="tether-machine-", dir=_SCRATCH)
        repository = open_repository(f"sqlite:///{Path(self.directory) / 'tether.db'}")
        assert isinstance(repository, SqliteJobRepository)
        return repository

    def close_repository(self, repository: JobRepository) -> None:
        repository.close()
        shutil.rmtree(self.directory, ignore_errors=True)


TestSqliteAgainstModel = SqliteMachine.test_case()
