"""The dashboard's actions (``POST``): retry, cancel, bulk retry of dead jobs, queue pause and resume,
purge.  Each one is checked first (read-only, origin, CSRF token: :func:`~.security.check_state_change`),
then confirmed (a POST without ``confirm=yes`` answers with a page asking for it), then done and
logged on ``tether.web.audit`` with the user who did it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from tether.domain.errors import InvalidTransition, JobNotFound
from tether.domain.overview import MAX_PAGE_LIMIT
from tether.domain.validation import validate_queue
from tether.entrypoints.web.dashboard import Dashboard, dashboard_of
from tether.entrypoints.web.params import BadParameter, positive_id, purge_before
from tether.entrypoints.web.security import check_state_change

audit = logging.getLogger("tether.web.audit")


class NotAvailable(Exception):
    """An action this Tether cannot do (answered 501 with this message)."""


async def _checked(request: Request) -> tuple[Dashboard, Any, str]:
    """The dashboard, the form and the user of a POST that passed the guards (else Forbidden)."""
    dash = dashboard_of(request)
    form = await request.form()
    return dash, form, check_state_change(request, form, read_only=dash.read_only)


async def _confirmed(
    request: Request,
    checked: tuple[Dashboard, Any, str],
    question: str,
    fields: dict[str, Any],
    perform: Callable[[Dashboard, str], str],
    *,
    details: str = "",
    destructive: bool = False,
) -> Response:
    """For a POST that passed the guards (``checked``, from :func:`_checked`): without ``confirm=yes``
    answer with the confirmation page (repeating ``fields``); with it, run ``perform(dashboard, user)``
    in a thread and redirect to the path it returns (under the dashboard's base path)."""
    dash, form, user = checked
    if form.get("confirm") != "yes":
        return dash.render(
            request, "confirm.html", "", question=question, details=details, action=request.url.path, fields=fields,
            destructive=destructive,
        )
    target = await run_in_threadpool(perform, dash, user)
    return RedirectResponse(dash.base(request) + target, status_code=303)


async def retry(request: Request) -> Response:
    checked = await _checked(request)  # the guards first: a POST without a valid token is a 403, whatever its id
    job_id = positive_id(request.path_params["job_id"], "job_id")

    def perform(dash: Dashboard, user: str) -> str:
        job = dash.app.retry(job_id)
        audit.info("dashboard: %s retried job %d (now %s)", user, job_id, job.status.value)
        return f"/jobs/{job_id}?done=retry"

    return await _confirmed(request, checked, f"Retry job {job_id}?", {}, perform,
                            details="Once confirmed, it is queued again at once, with its attempts reset to 0.")


async def cancel(request: Request) -> Response:
    checked = await _checked(request)  # the guards first: a POST without a valid token is a 403, whatever its id
    job_id = positive_id(request.path_params["job_id"], "job_id")

    def perform(dash: Dashboard, user: str) -> str:
        job = dash.app.cancel(job_id)
        audit.info("dashboard: %s cancelled job %d (now %s)", user, job_id, job.status.value)
        return f"/jobs/{job_id}?done=cancel"

    return await _confirmed(request, checked, f"Cancel job {job_id}?", {}, perform,
                            details="A waiting job is cancelled at once; a running one when its worker next reports.",
                            destructive=True)


async def bulk_retry(request: Request) -> Response:
    checked = await _checked(request)
    form = checked[1]
    raw = [str(v) for v in form.getlist("job_id")]
    if not raw:
        raise BadParameter("job_id", "select at least one job")
    if len(raw) > MAX_PAGE_LIMIT:
        raise BadParameter("job_id", f"at most {MAX_PAGE_LIMIT} jobs at once, got {len(raw)}")
    ids = sorted({positive_id(v, "job_id") for v in raw})

    def perform(dash: Dashboard, user: str) -> str:
        done, skipped = 0, 0
        for job_id in ids:
            try:
                dash.app.retry(job_id)
                done += 1
            except (JobNotFound, InvalidTransition):
                skipped += 1  # purged, or retried by someone else meanwhile
        audit.info("dashboard: %s retried %d selected job(s) (%d skipped: gone or no longer dead/cancelled): %s",
                   user, done, skipped, ids)
        return "/jobs?status=dead&done=bulk-retry"

    return await _confirmed(request, checked, f"Retry {len(ids)} selected job(s)?", {"job_id": ids}, perform,
                            details="Once confirmed, each is queued again at once, with its attempts reset to 0.")


async def pause_queue(request: Request) -> Response:
    return await _queue_action(request, "pause")


async def resume_queue(request: Request) -> Response:
    return await _queue_action(request, "resume")


async def _queue_action(request: Request, verb: str) -> Response:
    checked = await _checked(request)
    dash = checked[0]
    name = _queue_name(request.path_params["name"])
    if dash.queue_control is None:
        raise NotAvailable(f"queues cannot be paused or resumed: this version of Tether has no queue {verb}")
    act = dash.queue_control[0 if verb == "pause" else 1]

    def perform(dash: Dashboard, user: str) -> str:
        act(name)
        audit.info("dashboard: %s %sd queue %s", user, verb, name)
        return f"/queues?done={verb}"

    return await _confirmed(request, checked, f"{verb.capitalize()} queue {name}?", {}, perform)


def _queue_name(text: str) -> str:
    try:
        return validate_queue(text)
    except ValueError as error:
        raise BadParameter("queue", str(error)) from None


async def purge(request: Request) -> Response:
    checked = await _checked(request)
    form = checked[1]
    older_than = purge_before(str(form.get("older_than") or ""))

    def perform(dash: Dashboard, user: str) -> str:
        deleted = dash.app.purge(older_than)
        audit.info("dashboard: %s purged %d finished job(s) that finished before %s", user, deleted, older_than.isoformat())
        return "/purge?done=purge"

    return await _confirmed(
        request, checked, f"Delete every finished job that finished before {older_than:%Y-%m-%d %H:%M:%S} UTC?",
        {"older_than": form.get("older_than")}, perform,
        details="Completed, dead and cancelled jobs are deleted for good; their idempotency keys become free.",
        destructive=True,
    )


__all__ = ["NotAvailable", "bulk_retry", "cancel", "pause_queue", "purge", "resume_queue", "retry"]
