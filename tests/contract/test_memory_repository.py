"""The repository contract on the in-memory repository; copy this module for your own adapter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.ports.repository import JobRepository
from tether.testing.contract import RepositoryContract
from tether.testing.contract.reads import ReadContract


class TestInMemoryJobRepository(RepositoryContract):
    @pytest.fixture
    def repository(self, clock: FakeClock) -> Iterator[InMemoryJobRepository]:
        repo = InMemoryJobRepository()
        yield repo
        repo.close()


class PortDefaultCounts(InMemoryJobRepository):
    """The memory repository counting the jobs ahead with the port's default (a third-party store's)."""

    count_due_ahead = JobRepository.count_due_ahead


class TestPortDefaultCountDueAhead(ReadContract):
    """The read contract, ``count_due_ahead`` included, on the port's default implementation."""

    @pytest.fixture
    def repository(self, clock: FakeClock) -> Iterator[InMemoryJobRepository]:
        repo = PortDefaultCounts()
        yield repo
        repo.close()
