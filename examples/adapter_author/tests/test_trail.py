"""The adapter's own feature, tested with the kit: the trail follows a job through a drain."""

import tether
from my_store import AuditedJobRepository
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.testing import FakeClock, drain


def test_the_trail_records_each_state_of_a_retried_job():
    clock = FakeClock()
    repository = AuditedJobRepository(InMemoryJobRepository())
    app = tether.Tether(repository, PollingDispatcher(repository, clock), clock)
    calls = []

    @app.handler("flaky")
    def flaky(payload):
        calls.append(payload)
        if len(calls) == 1:
            raise ConnectionError("first try fails")

    job = app.enqueue("flaky", {}).job
    drain(app)
    assert [status for job_id, status, _ in repository.trail if job_id == job.id] == [
        "queued", "running", "retrying", "running", "completed"]
