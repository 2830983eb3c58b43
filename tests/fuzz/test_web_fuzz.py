"""Hostile input to the web dashboard (Starlette's TestClient, logged in, on memory and SQLite).

Every ``GET /jobs`` query string (status, queue, job_type, find, before, limit, unknown and repeated
parameters; negative, huge, unicode, percent-encoded surrogates and broken percent-encodings, very
long) and every ``GET /jobs/{id}`` is answered 200, 303 (a found job), 400 naming the bad
parameter, or 404: never a 500, and no GET changes a job.  Every ``POST`` action without a valid
CSRF token (none, empty, another one, non-ASCII, a hostile cookie) is answered 403 and changes
nothing, whatever else the request holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import tether
from hypothesis import assume, example, given
from hypothesis import strategies as st
from starlette.testclient import TestClient
from tether.entrypoints.service import Tether

from tests.fuzz.hostile import budget, hostile_text
from tests.web_support import client, dead_job

PARAMETERS = ("status", "queue", "job_type", "find", "before", "limit", "offset", "page", "job_id", "older_than")


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def dashboard(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Tether, TestClient]]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path_factory.mktemp('web_fuzz') / 'jobs.db'}"
    with tether.connect(url) as app:

        @app.handler("mail.send")
        def send(payload: Any) -> None:
            """Does nothing."""

        app.enqueue("mail.send", {"n": 1}, idempotency_key="key-1", queue="q")
        cancelled = app.enqueue("mail.send", {"n": 2}).job
        app.cancel(cancelled.id)
        dead_job(app, {"n": 3})
        with client(app) as c:
            yield app, c


def state(app: Tether) -> tuple[list[Any], list[Any]]:
    """Every stored job, whole, and the stored schedules: what no GET and no refused POST may change."""
    return app.list(limit=10_000), app.schedules()


def encoded(value: str) -> str:
    """``value`` percent-encoded as UTF-8, lone surrogates too (as a broken client would send them)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


VALUES = st.one_of(
    hostile_text().map(encoded),
    st.sampled_from(["queued", "dead", "running", "q", "mail.send", "key-1", "1", "2", "3", "50", "500"]),
    st.sampled_from(["-1", "0", "501", "1000000", "9223372036854775807", "9223372036854775808", "1" * 5000, "+1",
                     "%2B1", "1e3", "0x10", "%EF%BC%91", "%D9%A1", "%ED%A0%80", "%ED%BF%BF", "%ff%fe", "%", "%zz",
                     "%%", "%0", "%00", "%0A", "", "+", "%20", "DEAD", "dead%00", "..%2F..%2Fetc", "k" * 300]),
)
NAMES = st.one_of(st.sampled_from(["status", "queue", "job_type", "find", "before", "cursor", "limit", "offset",
                                   "page", "done"]), hostile_text(10).map(encoded))
#: Query strings up to 60,000 characters (the HTTP client's own limit is 65,536).
QUERIES = (
    st.lists(st.tuples(NAMES, VALUES), max_size=5)
    .map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
    .filter(lambda query: len(query) <= 60_000)
)


def answered(response: Any, allowed: tuple[int, ...]) -> None:
    assert response.status_code in allowed, (response.status_code, response.text[:500])
    if response.status_code == 400:
        assert any(name in response.text for name in PARAMETERS), response.text[:500]


@budget(100)
@given(query=QUERIES)
@example(query="status=dead&status=nope")
@example(query="find=%ED%A0%80")
@example(query="find=" + "9" * 19)
@example(query="before=-1&limit=" + "9" * 5000)
@example(query="job_type=" + "t" * 60_000)
def test_a_jobs_query_is_answered_200_303_400_or_404_and_changes_nothing(
    dashboard: tuple[Tether, TestClient], query: str
) -> None:
    app, c = dashboard
    before = state(app)
    answered(c.get(f"/jobs?{query}", follow_redirects=False), (200, 303, 400, 404))
    assert state(app) == before


JOB_IDS = st.one_of(
    st.integers(-3, 10).map(str),
    st.sampled_from(["9223372036854775807", "9223372036854775808", "1" * 5000, "%2B1", "1.0", "%EF%BC%91", "%ED%A0%80",
                     "%ff", "%00", "..", "%2E%2E", "%2F", "1%2F2", "1;2", " 1", "%201"]),
    hostile_text().map(encoded),
).filter(lambda job_id: len(job_id) <= 60_000)  # the HTTP client's URL limit is 65,536


@budget(60)
@given(job_id=JOB_IDS, query=st.sampled_from(["", "?done=retry", "?done=%ED%A0%80"]))
def test_a_job_page_is_answered_200_400_or_404_and_changes_nothing(
    dashboard: tuple[Tether, TestClient], job_id: str, query: str
) -> None:
    app, c = dashboard
    before = state(app)
    answer = c.get(f"/jobs/{job_id}{query}", follow_redirects=False)
    # The path as sent (the client resolves dot segments): else another page, or /jobs/ redirected to /jobs.
    routed = re.fullmatch(r"/jobs/[^/]+", answer.request.url.path) is not None
    answered(answer, (200, 400, 404) if routed else (200, 307, 404))
    assert state(app) == before


ACTIONS = st.one_of(
    st.sampled_from(["/jobs/1/retry", "/jobs/2/retry", "/jobs/3/retry", "/jobs/1/cancel", "/jobs/retry", "/purge",
                     "/queues/q/pause", "/queues/q/resume"]),
    JOB_IDS.map(lambda i: f"/jobs/{i}/retry"),
    JOB_IDS.map(lambda i: f"/jobs/{i}/cancel"),
    VALUES.map(lambda name: f"/queues/{name}/pause"),
).filter(lambda path: len(path) <= 60_000)
def _sendable(text: str) -> bool:
    """Whether ``text`` can go into a request as UTF-8 (no lone surrogates) in a header (no line break)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(c in text for c in "\x00\r\n;")


#: The paths of the actions, as the router matches them (percent-decoded).
ACTION_ROUTES = re.compile(r"/(jobs/[^/]+/(retry|cancel)|jobs/retry|purge|queues/[^/]+/(pause|resume))")
#: A CSRF field that does not match the cookie: none, empty, a guess, non-ASCII, very long.
TOKENS = st.one_of(st.none(), st.just(""), st.just("x" * 43), hostile_text(50).filter(lambda t: "\x00" not in t))
COOKIES = st.one_of(st.none(), st.just("c" * 43), st.just("é" * 40), st.just("t\u00ff" * 20), hostile_text(50).filter(_sendable))
FORMS = st.fixed_dictionaries(
    {},
    optional={
        "confirm": st.sampled_from(["yes", "no", "YES"]),
        "job_id": st.lists(st.one_of(st.sampled_from(["1", "2", "3"]), hostile_text(10)), max_size=3),
        "older_than": st.sampled_from(["2100-01-01", "2000-01-01T00:00:00+00:00", "bad", ""]),
    },
)


@budget(100)
@given(path=ACTIONS, token=TOKENS, cookie=COOKIES, form=FORMS)
@example(path="/jobs/3/retry", token="é" * 43, cookie="c" * 43, form={"confirm": "yes"})  # found: a TypeError
@example(path="/jobs/3/retry", token="c" * 43, cookie="é" * 43, form={"confirm": "yes"})
@example(path="/jobs/not-a-number/retry", token=None, cookie=None, form={"confirm": "yes"})  # found: 400 before the guard
@example(path="/queues/%ED%A0%80/pause", token=None, cookie=None, form={})
@example(path="/jobs/3/retry", token="0", cookie="0", form={"confirm": "yes"})  # found: a short cookie was a token
def test_an_action_without_a_valid_csrf_token_is_403_and_changes_nothing(
    dashboard: tuple[Tether, TestClient], path: str, token: str | None, cookie: str | None, form: dict[str, Any]
) -> None:
    assume(not (token is not None and token == cookie and len(token) >= 32))  # that would be a valid token
    app, c = dashboard
    pairs = [(name, value) for name, values in form.items() for value in ([values] if isinstance(values, str) else values)]
    if token is not None:
        pairs.append(("csrf_token", token))
    body = "&".join(f"{encoded(name)}={encoded(value)}" for name, value in pairs)  # surrogates as broken UTF-8
    headers: dict[str, Any] = {"origin": "http://testserver", "content-type": "application/x-www-form-urlencoded"}
    if cookie is not None:  # sent as raw UTF-8 bytes: the server reads them as Latin-1
        headers["cookie"] = f"tether_csrf={cookie}".encode()
    before = state(app)
    c.cookies.clear()
    answer = c.post(path, content=body, headers=headers, follow_redirects=False)
    if ACTION_ROUTES.fullmatch(answer.request.url.path):  # as sent: the client resolves dot segments
        assert answer.status_code == 403, (answer.status_code, answer.text[:500])
        assert "CSRF" in answer.text, answer.text[:500]
    else:  # no action answers this path at all
        assert answer.status_code in (307, 404, 405), (answer.status_code, answer.text[:500])
    assert state(app) == before
