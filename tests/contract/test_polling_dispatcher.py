"""The dispatcher contract against :class:`~tether.adapters.polling.PollingDispatcher` (memory repository)."""

from __future__ import annotations

import pytest
from tether.adapters.polling import PollingDispatcher
from tether.testing.contract.dispatcher import DispatcherContract

from tests.contract.repository_mixins import OnSqlite


class TestPollingDispatcher(DispatcherContract):
    @pytest.fixture
    def dispatcher(self, repository, clock):
        d = PollingDispatcher(repository, clock, poll_interval=0.05, min_poll_interval=0.005)
        yield d
        d.close()


class TestPollingDispatcherOnSqlite(OnSqlite, TestPollingDispatcher):
    """The same contract with a SQLite file repository under the dispatcher."""
