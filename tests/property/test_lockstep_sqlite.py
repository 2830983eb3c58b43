"""Memory and SQLite in lockstep: the same random history on both, failing on the first difference.

Every call must return the same jobs (compared by enqueue order, since ids may differ) or raise
the same error, and after every step both stores must hold the same jobs with the same counts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.sqlalchemy import SqliteJobRepository, open_repository
from tether.ports.repository import JobRepository
from tether.testing.statemachine import DEFAULT_SETTINGS, LockstepStateMachine

pytestmark = pytest.mark.slow

#: Database files go to a RAM-backed directory when there is one: these tests check what the
#: repository does, not durability, and fsync on a disk would be most of their time.
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class MemoryVsSqlite(LockstepStateMachine):
    #: 25 histories of up to 40 steps.
    hypothesis_settings = settings(DEFAULT_SETTINGS, max_examples=25)

    def make_left(self) -> JobRepository:
        return InMemoryJobRepository()

    def make_right(self) -> JobRepository:
        self.directory = tempfile.mkdtemp(prefix="tether-lockstep-", dir=_SCRATCH)
        repository = open_repository(f"sqlite:///{Path(self.directory) / 'tether.db'}")
        assert isinstance(repository, SqliteJobRepository)
        return repository

    def close_repository(self, repository: JobRepository) -> None:
        repository.close()
        if isinstance(repository, SqliteJobRepository):
            shutil.rmtree(self.directory, ignore_errors=True)


TestMemoryVsSqliteLockstep = MemoryVsSqlite.test_case()
