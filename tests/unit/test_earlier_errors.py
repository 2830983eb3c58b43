"""A job that failed, was retried and then completed keeps its last error (the last real failure),
but no view shows it as the job's present trouble: ``jobs list`` and the dashboard's job list
leave a completed job's error cell empty, while ``jobs show`` and the dashboard's job page show
the error marked as an earlier attempt's.  A job still retrying shows its error as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import tether
from tether.entrypoints.cli import app as cli_app
from tether.entrypoints.cli.jobs import EARLIER_ERROR
from tether.entrypoints.service import Tether
from typer.testing import CliRunner

from tests.web_support import client, new_app

ERROR = "RuntimeError: flaky failure attempt 1"


def failed_then(app: Tether, *, complete: bool) -> int:
    """A job whose first attempt failed with :data:`ERROR`; its second completed, or is yet to run."""
    job = app.enqueue("mail.send", {"to": "a@example.com"}, max_attempts=3).job
    first = app.repository.lease_job(job.id, worker_id="w-1", now=app.clock.now(), lease_timeout=60)
    assert first is not None and first.lease_token is not None
    app.repository.fail(job.id, first.lease_token, now=app.clock.now(), error=ERROR, retry_at=app.clock.now())
    if complete:
        second = app.repository.lease_job(job.id, worker_id="w-1", now=app.clock.now(), lease_timeout=60)
        assert second is not None and second.lease_token is not None
        app.repository.complete(job.id, second.lease_token, now=app.clock.now())
    return job.id


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with tether.connect(url) as app:
        failed_then(app, complete=True)
        failed_then(app, complete=False)
    return url


def output_of(*args: str) -> str:
    result = CliRunner().invoke(cli_app, list(args), env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


def test_jobs_list_shows_the_error_of_the_retrying_job_only(database: str) -> None:
    rows = {line.split()[0]: line for line in output_of("jobs", "list", "--database-url", database).splitlines()
            if line.split() and line.split()[0].isdigit()}
    assert "completed" in rows["1"] and "RuntimeError" not in rows["1"]
    assert "retrying" in rows["2"] and "RuntimeError: flaky failure" in rows["2"]  # the column is cut at 30


def test_jobs_show_marks_a_completed_jobs_error_as_an_earlier_attempts(database: str) -> None:
    done = [line.strip() for line in output_of("jobs", "show", "1", "--database-url", database).splitlines()]
    at = next(i for i, line in enumerate(done) if line.startswith("last_error"))
    assert ERROR in done[at] and done[at + 1] == EARLIER_ERROR
    retrying = output_of("jobs", "show", "2", "--database-url", database)
    assert ERROR in retrying and EARLIER_ERROR not in retrying


def test_jobs_why_marks_it_too(database: str) -> None:
    line = next(li for li in output_of("jobs", "why", "1", "--database-url", database).splitlines() if "last_error:" in li)
    assert line.endswith(f"{ERROR} {EARLIER_ERROR}")
    retrying = next(li for li in output_of("jobs", "why", "2", "--database-url", database).splitlines() if "last_error:" in li)
    assert retrying.endswith(ERROR)


def test_jobs_list_leaves_a_finished_jobs_due_time_out(database: str) -> None:
    rows = {line.split()[0]: line for line in output_of("jobs", "list", "--database-url", database).splitlines()
            if line.split() and line.split()[0].isdigit()}
    day = rows["2"].split()[5]  # the retrying job is due: its date is shown
    assert day[:4].isdigit() and day not in rows["1"]


def test_the_json_view_keeps_the_error_as_stored(database: str) -> None:
    assert f'"last_error": "{ERROR}"' in output_of("jobs", "show", "1", "--database-url", database, "--json")


def test_the_dashboards_job_list_and_page_say_whose_error_it_is() -> None:
    app = new_app()
    done, retrying = failed_then(app, complete=True), failed_then(app, complete=False)
    c = client(app)
    listed = c.get("/jobs").text
    rows = {job_id: listed.split(f'href="/jobs/{job_id}"', 1)[1].split("</tr>", 1)[0] for job_id in (done, retrying)}
    assert "flaky failure" not in rows[done]
    assert "flaky failure" in rows[retrying]
    page = c.get(f"/jobs/{done}").text
    assert "An earlier attempt's: the job completed after it." in page and ERROR in page
    assert "An earlier attempt" not in c.get(f"/jobs/{retrying}").text
