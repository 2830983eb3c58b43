"""Public contract suites: any repository or dispatcher, ours or a third party's, runs them by supplying a fixture.

``from tether.testing.contract import RepositoryContract`` (needs pytest; see
:mod:`tether.testing.contract.repository`).
"""

from __future__ import annotations

from typing import Any

from tether.testing.contract.repository import RepositoryContract


def __getattr__(name: str) -> Any:
    # The dispatcher contract lives in its own module; load it only when asked for.
    if name == "DispatcherContract":
        from tether.testing.contract import dispatcher

        return dispatcher.DispatcherContract
    raise AttributeError(name)


__all__ = ["RepositoryContract"]
