"""Public contract suites: any repository or dispatcher, ours or a third party's, runs them by supplying a fixture.

``from tether.testing.contract import RepositoryContract`` (needs pytest; see
:mod:`tether.testing.contract.repository`); ``DispatcherContract`` (in
:mod:`tether.testing.contract.dispatcher`), ``WorkerRegistryContract`` (in
:mod:`tether.testing.contract.worker_registry`), ``ScheduleStoreContract`` (in
:mod:`tether.testing.contract.schedules`) and ``OverviewContract`` (in
:mod:`tether.testing.contract.overview`) are loaded only when asked for.
"""

from __future__ import annotations

from tether._lazy import lazy_names as _lazy_names
from tether.testing.contract.repository import RepositoryContract

__all__ = ["DispatcherContract", "OverviewContract", "RepositoryContract", "ScheduleStoreContract", "WorkerRegistryContract"]

__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "DispatcherContract": "tether.testing.contract.dispatcher",
        "ScheduleStoreContract": "tether.testing.contract.schedules",
        "OverviewContract": "tether.testing.contract.overview",
        "WorkerRegistryContract": "tether.testing.contract.worker_registry",
    },
)
