"""pytest plugin of Tether, registered through the ``pytest11`` entry point (``tether``).

Installing ``tether-jobs`` is enough for pytest to load it.  It provides:

- ``tether_clock``: a fresh :class:`~tether.adapters.clock.FakeClock` (2026-01-01T00:00:00Z);
- ``tether_app``: :func:`tether.testing.fake_app` on that clock (in-memory store, polling
  dispatcher), closed after the test;
- the markers ``slow``, ``postgres`` and ``redis`` used by the contract suites, so a project
  running them with ``--strict-markers`` needs no marker configuration of its own.

Importing this module loads nothing but pytest; Tether's modules are imported when a fixture is
first used, and Hypothesis is never needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tether.adapters.clock import FakeClock
    from tether.entrypoints.service import Tether

MARKERS = (
    "slow: takes more than a few seconds (Tether contract suites)",
    "postgres: needs a PostgreSQL server (Tether contract suites)",
    "redis: needs a Redis server (Tether contract suites)",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


@pytest.fixture
def tether_clock() -> FakeClock:
    """A new FakeClock at 2026-01-01T00:00:00Z; it moves only with ``advance``/``set`` (or a drain)."""
    from tether.adapters.clock import FakeClock

    return FakeClock()


@pytest.fixture
def tether_app(tether_clock: FakeClock) -> Iterator[Tether]:
    """A :class:`tether.Tether` on an empty in-memory store and ``tether_clock``; closed afterwards."""
    from tether.testing.fake import fake_app

    app = fake_app(tether_clock)
    try:
        yield app
    finally:
        app.close()
