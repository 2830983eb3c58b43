"""The dispatcher contract against :class:`~tether.adapters.polling.PollingDispatcher` (memory repository)."""

from __future__ import annotations

import pytest
from tether.adapters.polling import PollingDispatcher
from tether.testing.contract.dispatcher import DispatcherContract


class TestPollingDispatcher(DispatcherContract):
    @pytest.fixture
    def dispatcher(self, repository, clock):
        d = PollingDispatcher(repository, clock, poll_interval=0.05, min_poll_interval=0.005)
        yield d
        d.close()


class TestPollingDispatcherOnSqlite(TestPollingDispatcher):
    """The same contract with a SQLite file repository under the dispatcher."""

    @pytest.fixture
    def repository(self, tmp_path):
        from tether.adapters.sqlalchemy import open_repository

        repo = open_repository(f"sqlite:///{tmp_path / 'contract.db'}")
        yield repo
        repo.close()
