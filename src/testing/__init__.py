"""Test kit: fakes and helpers for code that uses Tether, and the public contract suites for adapters.

For applications (no database, no broker, nothing but the standard library and Tether)::

    from tether.testing import fake_app, drain, assert_enqueued

    app = fake_app()                                   # a real tether.Tether on memory + FakeClock
    place_order(app, order)                            # the code under test
    assert_enqueued(app, "emails.order_confirmation", {"order_id": 7}, count=1)
    report = drain(app)                                # run due jobs inline, retries included
    assert [run.outcome for run in report] == ["completed"]

With pytest the ``tether_app`` and ``tether_clock`` fixtures do the wiring (the plugin is
registered through the ``pytest11`` entry point, so installing ``tether-jobs`` is enough).

For adapter authors: :class:`RepositoryContract`, :class:`DispatcherContract`,
:class:`WorkerRegistryContract`, :class:`ScheduleStoreContract` and :class:`OverviewContract` (need pytest),
:class:`RepositoryStateMachine`, :class:`LockstepStateMachine` and :class:`AsyncApiStateMachine`
(need Hypothesis).

Every name is loaded on first use, so ``import tether.testing`` is cheap and works without pytest
or Hypothesis installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether._lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from tether.adapters.clock import FakeClock
    from tether.testing.assertions import ANY, assert_enqueued, assert_not_enqueued, enqueued_jobs
    from tether.testing.contract import (
        DispatcherContract,
        OverviewContract,
        RepositoryContract,
        ScheduleStoreContract,
        WorkerRegistryContract,
    )
    from tether.testing.fake import fake_app
    from tether.testing.inline import DrainLimitExceeded, DrainReport, JobRun, adrain, drain
    from tether.testing.statemachine import AsyncApiStateMachine, LockstepStateMachine, RepositoryStateMachine

_EXPORTS = {
    "fake_app": "tether.testing.fake",
    "drain": "tether.testing.inline",
    "adrain": "tether.testing.inline",
    "DrainReport": "tether.testing.inline",
    "DrainLimitExceeded": "tether.testing.inline",
    "JobRun": "tether.testing.inline",
    "assert_enqueued": "tether.testing.assertions",
    "assert_not_enqueued": "tether.testing.assertions",
    "enqueued_jobs": "tether.testing.assertions",
    "ANY": "tether.testing.assertions",
    "FakeClock": "tether.adapters.clock",
    "RepositoryContract": "tether.testing.contract",
    "DispatcherContract": "tether.testing.contract",
    "WorkerRegistryContract": "tether.testing.contract",
    "ScheduleStoreContract": "tether.testing.contract",
    "OverviewContract": "tether.testing.contract",
    "RepositoryStateMachine": "tether.testing.statemachine",
    "LockstepStateMachine": "tether.testing.statemachine",
    "AsyncApiStateMachine": "tether.testing.statemachine",
}

__all__ = [
    "ANY",
    "AsyncApiStateMachine",
    "DispatcherContract",
    "DrainLimitExceeded",
    "DrainReport",
    "FakeClock",
    "JobRun",
    "LockstepStateMachine",
    "OverviewContract",
    "RepositoryContract",
    "RepositoryStateMachine",
    "ScheduleStoreContract",
    "WorkerRegistryContract",
    "adrain",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "enqueued_jobs",
    "fake_app",
]


__getattr__, __dir__ = _lazy_names(__name__, globals(), _EXPORTS)
