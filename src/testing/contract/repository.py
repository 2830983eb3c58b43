"""The repository contract suite: one class any :class:`~tether.ports.repository.JobRepository` runs.

An adapter author subclasses :class:`RepositoryContract` in a test module and supplies a
function-scoped ``repository`` fixture that yields a fresh, empty repository (it may use the
``clock`` fixture the class provides, a :class:`~tether.adapters.clock.FakeClock`)::

    import pytest
    from tether.testing.contract import RepositoryContract

    class TestMyRepository(RepositoryContract):
        @pytest.fixture
        def repository(self, clock):
            repo = MyJobRepository(...)
            yield repo
            repo.close()

The suite covers the acceptance cases C01-C04, C09a, C10, C11-C15 and C21 of
``shared/cases/README.md`` with their exact values, and the rest of the port: reads, lease limits
and queue filters, leases filtered by job type (:mod:`~tether.testing.contract.typed_leases`), lease-by-id, heartbeats, release, fenced batch completion (``complete_many``), the reaper, manual retry, purge, token
uniqueness, the time rule, and the accepted ranges of numbers, times and text
(:mod:`~tether.testing.contract.limits`); an operator's cancel (one job or by filter) and the holder's snooze,
with cancels racing leases, completions (single and batch), failures, heartbeats and the reaper; the
attempt history each outcome write appends to (:mod:`~tether.testing.contract.history`); queue
controls and per-key running limits (:mod:`~tether.testing.contract.key_limits`).  Every time comes from the fake clock.  Slow backends may lower the
knobs documented on :class:`~tether.testing.contract.support.ContractSupport`
(``concurrent_enqueuers``, ``token_reuse_leases``, ``reap_race_jobs``, ``cancel_race_jobs``, ...).
"""

from __future__ import annotations

from tether.testing.contract.batch import BatchCompletionContract
from tether.testing.contract.cancellation import CancellationContract
from tether.testing.contract.enqueue import EnqueueContract
from tether.testing.contract.history import HistoryContract
from tether.testing.contract.key_limits import KeyLimitContract
from tether.testing.contract.leases import LeaseContract
from tether.testing.contract.limits import LimitContract
from tether.testing.contract.queue_controls import QueueControlContract
from tether.testing.contract.reads import ReadContract
from tether.testing.contract.retries import RetryContract
from tether.testing.contract.typed_leases import TypedLeaseContract


class RepositoryContract(
    EnqueueContract,
    LeaseContract,
    TypedLeaseContract,
    BatchCompletionContract,
    RetryContract,
    CancellationContract,
    HistoryContract,
    ReadContract,
    LimitContract,
    QueueControlContract,
    KeyLimitContract,
):
    """The whole repository contract.  No ``Test`` prefix: pytest collects only your subclass."""


__all__ = ["RepositoryContract"]
