"""Prometheus metrics: what each worker alone knows (:class:`WorkerMetrics`), and the store-wide
queue gauges computed in one place on each scrape (:class:`StoreCollector`).  Needs
``tether[prometheus]``.

Per worker process (``tether worker --metrics-port N``, or ``app.worker(observers=[metrics])``
and :func:`serve`):

- ``tether_jobs_completed_total{queue, job_type}``
- ``tether_jobs_failed_total{queue, job_type, outcome}``: ``outcome`` is ``retrying`` (another
  attempt is due) or ``dead`` (attempts used up, or a ``PermanentError``)
- ``tether_jobs_cancelled_total{queue, job_type}``, ``tether_jobs_snoozed_total{queue, job_type}``
- ``tether_job_duration_seconds{queue, job_type}``: histogram, from the handler's start until its
  outcome was recorded
- ``tether_leases_lost_total``, ``tether_jobs_reaped_total``, ``tether_jobs_released_total``,
  ``tether_jobs_timed_out_total``, ``tether_jobs_no_handler_total``: the pools' counters
  (:class:`~tether.entrypoints.worker.stats.WorkerStats`), read on each scrape
- ``tether_worker_jobs_in_flight``: jobs the process's pools hold now

Store-wide, once (the dashboard's ``/metrics``, or any process that registers
:func:`store_gauges`), never by every worker:

- ``tether_queue_depth{queue, status}``: live jobs per status (``queued``, ``running``,
  ``retrying``) of each queue holding one
- ``tether_queue_latency_seconds{queue}``: how long the oldest due job of the queue has waited
- ``tether_queue_scrape_success``: 1 when the store answered the scrape, else 0

Labels stay few: queue names and job types (both come from code and configuration), an outcome
from a fixed set; never a job id, key or worker id.
"""

from __future__ import annotations

import errno
import logging
import math
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tether.domain.errors import TetherError, ValidationError
from tether.domain.job import Job
from tether.entrypoints.execution import Execution, Outcome
from tether.entrypoints.worker.observers import PoolView

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether

logger = logging.getLogger("tether.metrics")

#: Upper bounds of ``tether_job_duration_seconds``'s buckets, in seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, math.inf)

#: The pools' counters exported as ``tether_<name>_total``: metric name -> WorkerStats field, help.
POOL_COUNTERS = {
    "tether_leases_lost": ("lease_lost", "Writes refused by the lease's fence (complete, fail, heartbeat, release)."),
    "tether_jobs_reaped": ("reaped", "Expired leases taken back by this process's reaper (any worker's)."),
    "tether_jobs_released": ("released", "Jobs handed back unfinished at shutdown."),
    "tether_jobs_timed_out": ("timed_out", "Handlers that ran past their time limit."),
    "tether_jobs_no_handler": ("no_handler", "Jobs handed back because this process has no handler for their type."),
}


class _PoolCounters(Collector):
    """The counters of the pools a :class:`WorkerMetrics` watches, summed, read on each scrape."""

    def __init__(self) -> None:
        self.pools: list[PoolView] = []

    def describe(self) -> Iterable[Metric]:
        counters, in_flight = self._families()
        return [*counters, in_flight]

    def collect(self) -> Iterable[Metric]:
        counters, in_flight = self._families()
        pools = list(self.pools)
        stats = [pool.stats for pool in pools]
        for family in counters:
            field = POOL_COUNTERS[family.name][0]
            family.add_metric([], sum(getattr(s, field) for s in stats))
        in_flight.add_metric([], sum(pool.in_flight for pool in pools))
        return [*counters, in_flight]

    @staticmethod
    def _families() -> tuple[list[CounterMetricFamily], GaugeMetricFamily]:
        return ([CounterMetricFamily(name, text) for name, (_, text) in POOL_COUNTERS.items()],
                GaugeMetricFamily("tether_worker_jobs_in_flight", "Jobs this process's worker pools hold now."))


class WorkerMetrics:
    """A :class:`~tether.entrypoints.worker.observers.JobObserver` counting each job's outcome and
    time into Prometheus metrics (listed in the module docstring).

    One per process and registry: give the same one to every pool of the process
    (``app.worker(observers=[metrics])``); a second one on the same registry raises
    ``ValueError`` (duplicated time series).

    Args:
        registry: where the metrics are registered (default: prometheus_client's global
            ``REGISTRY``, which :func:`serve` exports).
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        labels = ("queue", "job_type")
        self._completed = Counter("tether_jobs_completed", "Jobs completed.", labels, registry=registry)
        self._failed = Counter("tether_jobs_failed", "Failed attempts, by what followed (retrying or dead).",
                               (*labels, "outcome"), registry=registry)
        self._cancelled = Counter("tether_jobs_cancelled", "Jobs cancelled by an operator while this process ran them.",
                                  labels, registry=registry)
        self._snoozed = Counter("tether_jobs_snoozed", "Jobs whose handler raised Snooze.", labels, registry=registry)
        self._duration = Histogram("tether_job_duration_seconds", "Seconds from a handler's start until its outcome was "
                                   "recorded.", labels, buckets=DURATION_BUCKETS, registry=registry)
        self._pools = _PoolCounters()
        registry.register(self._pools)
        # (outcome, queue, job_type) -> (counter child or None, histogram child): labels() takes a
        # lock and builds a tuple each time; a job's finish looks its children up once here instead.
        self._children: dict[tuple[Outcome, str, str], tuple[Counter | None, Histogram]] = {}
        self._lock = threading.Lock()

    def pool_started(self, pool: PoolView) -> None:
        """Its counters are exported from now on (summed with the other pools')."""
        self._pools.pools.append(pool)

    def job_started(self, job: Job, worker_id: str) -> object:
        """Nothing is counted at the start."""
        return None

    def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
        """Nothing: outcomes are counted once recorded (:meth:`job_finished`)."""

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        key = (outcome, job.queue, job.job_type)
        children = self._children.get(key)
        if children is None:
            children = self._children_of(key)
        counter, duration = children
        if counter is not None:
            counter.inc()
        duration.observe(seconds)

    def _children_of(self, key: tuple[Outcome, str, str]) -> tuple[Counter | None, Histogram]:
        outcome, queue, job_type = key
        with self._lock:
            counter: Counter | None
            if outcome is Outcome.COMPLETED:
                counter = self._completed.labels(queue, job_type)
            elif outcome in (Outcome.RETRYING, Outcome.DEAD):
                counter = self._failed.labels(queue, job_type, outcome.value)
            elif outcome is Outcome.CANCELLED:
                counter = self._cancelled.labels(queue, job_type)
            elif outcome is Outcome.SNOOZED:
                counter = self._snoozed.labels(queue, job_type)
            else:  # NO_HANDLER: counted by the pools' tether_jobs_no_handler_total
                counter = None
            children = self._children[key] = (counter, self._duration.labels(queue, job_type))
        return children


class StoreCollector(Collector):
    """The store-wide queue gauges (see the module docstring), read from ``app`` on each scrape
    with one cheap statement (:meth:`Tether.queue_summaries`).  Register it once per deployment
    (``registry.register(StoreCollector(app))``, or :func:`store_gauges`), e.g. in the dashboard.

    A store that cannot be read gives ``tether_queue_scrape_success 0`` and no queue samples
    (logged at WARNING), never a failed scrape.
    """

    def __init__(self, app: Tether) -> None:
        self._app = app

    def describe(self) -> Iterable[Metric]:
        return self._families()  # no samples: registering never reads the store

    def collect(self) -> Iterator[Metric]:
        depth, latency, success = self._families()
        try:
            summaries = self._app.queue_summaries()
        except TetherError as error:
            logger.warning("could not read the queue gauges: %s", error)
            success.add_metric([], 0)
            yield success
            return
        now = self._app.clock.now()
        for summary in summaries:
            for status in ("queued", "running", "retrying"):
                depth.add_metric([summary.queue, status], getattr(summary, status))
            latency.add_metric([summary.queue], summary.latency(now) or 0.0)  # 0 when nothing is due
        success.add_metric([], 1)
        yield from (depth, latency, success)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("tether_queue_depth", "Live jobs per queue and status.", labels=["queue", "status"]),
            GaugeMetricFamily("tether_queue_latency_seconds", "Seconds the oldest due job of the queue has waited.",
                              labels=["queue"]),
            GaugeMetricFamily("tether_queue_scrape_success", "1 when the store answered this scrape, else 0."),
        )


def store_gauges(app: Tether, registry: CollectorRegistry = REGISTRY) -> StoreCollector:
    """Register a :class:`StoreCollector` of ``app`` on ``registry`` (default: the global one)
    and return it (``registry.unregister(collector)`` removes it)."""
    collector = StoreCollector(app)
    registry.register(collector)
    return collector


def serve(port: int, *, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> threading.Thread:
    """Export ``registry`` at ``http://addr:port/metrics`` from a daemon thread; returns it.

    Raises:
        ValidationError (field ``metrics_port``): ``port`` is not 0-65535, or the address is in
            use or cannot be bound.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValidationError("metrics_port", f"must be a port number 0-65535, got {port!r}")
    try:
        _server, thread = start_http_server(port, addr, registry)
    except OSError as error:
        problem = "is in use" if error.errno == errno.EADDRINUSE else f"cannot be bound ({error.strerror or error})"
        raise ValidationError("metrics_port", f"{addr}:{port} {problem}; choose another port") from None
    return thread


__all__ = ["DURATION_BUCKETS", "POOL_COUNTERS", "StoreCollector", "WorkerMetrics", "serve", "store_gauges"]
