"""The repository contract suite on SQLite: a fresh database file per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tether.adapters.sqlalchemy import SqliteJobRepository, open_repository
from tether.testing.contract import RepositoryContract


class TestSqliteRepository(RepositoryContract):
    @pytest.fixture
    def repository(self, tmp_path: Path) -> Iterator[SqliteJobRepository]:
        repo = open_repository(f"sqlite:///{tmp_path / 'tether.db'}")
        assert isinstance(repo, SqliteJobRepository)
        yield repo
        repo.close()
