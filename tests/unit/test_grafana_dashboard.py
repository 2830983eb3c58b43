"""The Grafana dashboard shipped in docs/ queries only metrics Tether exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.entrypoints.execution import Outcome
from tether.entrypoints.service import Tether
from tether.metrics import WorkerMetrics, store_gauges

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "tether-dashboard.json"


def exported_series() -> set[str]:
    """Every series name a worker and the store gauges export (histogram parts included)."""
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    repo = InMemoryJobRepository()
    clock = FakeClock()
    app = Tether(repo, PollingDispatcher(repo, clock), clock)
    store_gauges(app, registry)
    app.enqueue("t", queue="q")
    for outcome in (Outcome.COMPLETED, Outcome.RETRYING, Outcome.CANCELLED, Outcome.SNOOZED):
        metrics.job_finished(app.get(1), outcome, 0.1)  # labelled series appear once observed
    return {sample.name for family in registry.collect() for sample in family.samples}


def test_every_query_of_the_dashboard_names_an_exported_series() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs.append(dashboard["templating"]["list"][1]["definition"])
    named = {name for expr in exprs for name in re.findall(r"\btether_[a-z_]+", expr)}
    exported = exported_series()
    assert named and named <= exported, sorted(named - exported)
    assert {"tether_queue_depth", "tether_queue_latency_seconds", "tether_jobs_completed_total",
            "tether_job_duration_seconds_bucket"} <= named
