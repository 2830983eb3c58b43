"""Repositories to run a dispatcher contract suite over, as mixins.

A suite's ``repository`` fixture defaults to the memory repository; list one of these before the
suite's class to run the same tests over another one::

    class TestMyDispatcherOnSqlite(OnSqlite, TestMyDispatcher): ...

- :class:`OnSqlite`: a SQLite file in the test's ``tmp_path``, closed afterwards.
- :class:`OnPostgres`: a PostgreSQL schema of the test's own on the test server (see
  tests/postgres_fixtures.py), dropped afterwards; mark the class ``pytest.mark.postgres``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether.adapters.sqlalchemy import PostgresJobRepository, SqlAlchemyJobRepository, open_repository

from tests.postgres_fixtures import schema_name, temporary_repository

_counter = itertools.count()


class OnSqlite:
    """Overrides ``repository``: a SQLite file repository under the dispatcher."""

    @pytest.fixture
    def repository(self, tmp_path: Path) -> Iterator[SqlAlchemyJobRepository]:
        repo = open_repository(f"sqlite:///{tmp_path / 'contract.db'}")
        yield repo
        repo.close()


class OnPostgres:
    """Overrides ``repository``: a PostgreSQL repository on a schema of its own (20 connections)."""

    @pytest.fixture
    def repository(self) -> Iterator[PostgresJobRepository]:
        with temporary_repository(schema_name(f"disp{next(_counter)}"), pool_size=20) as repo:
            yield repo
