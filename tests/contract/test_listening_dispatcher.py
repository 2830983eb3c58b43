"""The contracts on PostgreSQL with LISTEN/NOTIFY wake-ups on: the dispatcher contract against
:class:`~tether.adapters.pg_notify.ListeningDispatcher`, and the repository contract against a
repository whose writes notify (the notifying statements must behave exactly as the plain ones)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from tether.adapters.pg_notify import ListeningDispatcher
from tether.adapters.polling import PollingDispatcher
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.testing.contract.dispatcher import DispatcherContract
from tether.testing.contract.repository import RepositoryContract

from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def notifying_repository() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name("listen_contract"), pool_size=30) as repo:
        repo.enable_wakeups()
        yield repo


@pytest.fixture
def fresh_notifying_repository(notifying_repository: PostgresJobRepository) -> Iterator[PostgresJobRepository]:
    empty_tables(notifying_repository)
    notifying_repository._closed = False
    yield notifying_repository


class TestListeningDispatcher(DispatcherContract):
    @pytest.fixture
    def repository(self, fresh_notifying_repository: PostgresJobRepository) -> PostgresJobRepository:
        return fresh_notifying_repository

    @pytest.fixture
    def dispatcher(self, repository, clock):
        args, params = repository.engine.dialect.create_connect_args(repository.engine.url)

        def connect() -> Any:
            return psycopg.connect(*args, **{**params, "autocommit": True})

        polling = PollingDispatcher(repository, clock, poll_interval=0.05, min_poll_interval=0.005)
        d = ListeningDispatcher(polling, clock, connect, repository.wakeup_channel)
        yield d
        d.close()


class TestNotifyingPostgresRepository(RepositoryContract):
    @pytest.fixture
    def repository(self, fresh_notifying_repository: PostgresJobRepository) -> PostgresJobRepository:
        return fresh_notifying_repository
