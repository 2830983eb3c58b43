"""The repository contract on the in-memory repository; copy this module for your own adapter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.testing.contract import RepositoryContract


class TestInMemoryJobRepository(RepositoryContract):
    @pytest.fixture
    def repository(self, clock: FakeClock) -> Iterator[InMemoryJobRepository]:
        repo = InMemoryJobRepository()
        yield repo
        repo.close()
