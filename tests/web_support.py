"""Helpers of the dashboard's tests: an app on the memory store with jobs in given states, and clients."""

from __future__ import annotations

import re
from typing import Any

import tether
from starlette.testclient import TestClient
from tether import Tether
from tether.domain.job import Job
from tether.web import create_app

USER, PASSWORD = "ops", "s3cret-pass"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def new_app() -> Tether:
    app = tether.connect("memory://")

    @app.handler("mail.send")
    def send(payload: Any) -> None:
        """Does nothing."""

    return app


def dead_job(app: Tether, payload: Any = None, error: str = "boom") -> Job:
    """A job that failed its only attempt."""
    job = app.enqueue("mail.send", payload if payload is not None else {"to": "a@example.com"}, max_attempts=1).job
    leased = app.repository.lease_job(job.id, worker_id="w-test", now=app.clock.now(), lease_timeout=60)
    assert leased is not None and leased.lease_token
    app.repository.fail(job.id, leased.lease_token, now=app.clock.now(), error=error, retry_at=None)
    return app.get(job.id)


def running_job(app: Tether) -> tuple[Job, str]:
    """A running job and its lease token."""
    job = app.enqueue("mail.send", {"run": True}).job
    leased = app.repository.lease_job(job.id, worker_id="w-holder", now=app.clock.now(), lease_timeout=60)
    assert leased is not None and leased.lease_token
    return leased, leased.lease_token


def client(app: Tether, **options: Any) -> TestClient:
    """A logged-in client of ``create_app(app, ...)`` (credentials unless ``authorize`` is given)."""
    if "authorize" not in options:
        options.setdefault("username", USER)
        options.setdefault("password", PASSWORD)
    web = create_app(app, **options)
    c = TestClient(web, base_url="http://testserver")
    if "authorize" not in options:
        c.auth = (USER, PASSWORD)
    return c


def token_of(c: TestClient, path: str = "/") -> str:
    """The CSRF token a page's forms carry (the page sets the cookie too)."""
    page = c.get(path)
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    if found:
        return found.group(1)
    cookie = c.cookies.get("tether_csrf")
    assert cookie
    return str(cookie)


def post(c: TestClient, path: str, data: dict[str, Any] | None = None, *, token: str | None = None, **headers: str) -> Any:
    """POST a form as the dashboard's own page would (same origin), with ``token`` when given."""
    form = dict(data or {})
    if token is not None:
        form["csrf_token"] = token
    return c.post(path, data=form, headers={"origin": "http://testserver", **headers}, follow_redirects=False)
