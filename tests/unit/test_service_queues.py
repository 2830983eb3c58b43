"""The queue side of the Tether API on the memory store: pause, limits, rates, queues(), explain
naming a queue control, and bad input (ValidationError naming the field, nothing written)."""

from __future__ import annotations

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.workers import WorkerEntry
from tether.testing import fake_app


def test_queues_lists_controls_and_counts_and_explain_names_them() -> None:
    app = fake_app()
    mail = app.enqueue("mail.send", {}, queue="mail").job
    api = [app.enqueue("api.call", {"n": n}, queue="api").job for n in range(4)]
    now = app.clock.now()
    app.repository.record_worker(WorkerEntry(  # type: ignore[attr-defined]
        worker_id="w-1", host="h", pid=1, queues=None, job_types=("mail.send", "api.call"), concurrency=4,
        version="0", dispatcher="polling", heartbeat_interval=10.0, started_at=now, last_seen_at=now,
    ))
    app.pause_queue("mail")
    app.limit_queue("api", max_running=1)
    app.rate_limit_queue("idle", starts=10, per=60)
    infos = {q.name: q for q in app.queues()}
    assert sorted(infos) == ["api", "idle", "mail"]
    assert (infos["mail"].paused, infos["mail"].counts[JobStatus.QUEUED]) == (True, 1)
    assert (infos["api"].max_running, infos["idle"].rate_limit, infos["idle"].rate_period) == (1, 10, 60.0)
    assert app.explain(mail.id).reason == "paused"
    leased = app.repository.lease(queues=["api"], worker_id="w", now=app.clock.now(), lease_timeout=60, limit=5)
    assert len(leased) == 1
    assert app.explain(api[1].id).reason == "limited"
    app.limit_queue("api", max_running=None)
    app.rate_limit_queue("api", starts=2, per=60)
    assert len(app.repository.lease(queues=["api"], worker_id="w", now=app.clock.now(), lease_timeout=60, limit=5)) == 2
    assert app.explain(api[3].id).reason == "rate_limited"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda app: app.pause_queue(""), "queue"),
        (lambda app: app.resume_queue("a b"), "queue"),
        (lambda app: app.limit_queue("api", max_running=0), "max_running"),
        (lambda app: app.limit_queue("api", max_running=-3), "max_running"),
        (lambda app: app.rate_limit_queue("api", starts=0, per=10), "rate_limit"),
        (lambda app: app.rate_limit_queue("api", starts=5, per=0), "rate_period"),
        (lambda app: app.rate_limit_queue("api", starts=5), "rate_period"),
        (lambda app: app.rate_limit_queue("bad/name", starts=5, per=1), "queue"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(call, field: str) -> None:  # type: ignore[no-untyped-def]
    app = fake_app()
    with pytest.raises(ValidationError) as caught:
        call(app)
    assert caught.value.field == field
    assert app.repository.queue_states() == []
    assert isinstance(app.clock, FakeClock)
