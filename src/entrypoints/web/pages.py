"""The dashboard's pages (``GET``): overview, jobs, one job with its attempt history, queues,
workers, schedules, the purge form, and the server-sent events stream.  Each reads through :class:`~.snapshot.StoreReader` and
renders a template; bad parameters are refused by :mod:`.params` (400)."""

from __future__ import annotations

import json

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response, StreamingResponse
from tether.domain.history import HISTORY_LIMIT, after_retry
from tether.domain.job import RETRYABLE_STATUSES, JobStatus
from tether.domain.validation import CANCELLABLE_STATUSES, DEFAULT_QUEUE
from tether.entrypoints.web.chart import throughput_svg
from tether.entrypoints.web.dashboard import HERE, Dashboard, dashboard_of
from tether.entrypoints.web.params import BadParameter, jobs_query, positive_id

#: What the flash line says after an action's redirect (``?done=<key>``); nothing else is shown.
DONE = {
    "retry": "Job queued again.",
    "cancel": "Cancel recorded.",
    "bulk-retry": "Selected jobs queued again.",
    "purge": "Finished jobs purged.",
    "pause": "Queue paused: no worker starts its jobs until it is resumed.",
    "resume": "Queue resumed.",
}


async def overview(request: Request) -> Response:
    dash = dashboard_of(request)
    snapshot = await dash.feed.current()
    return dash.render(
        request, "overview.html", "overview",
        snapshot=snapshot, chart=throughput_svg(snapshot.throughput, snapshot.taken_at),
        statuses=list(JobStatus), live=snapshot.as_json()["figures"],
    )


async def jobs(request: Request) -> Response:
    dash = dashboard_of(request)
    params = request.query_params
    if "find" in params:
        return await _find(request, dash, params["find"].strip())
    query = jobs_query(params)
    page = await run_in_threadpool(dash.reader.jobs, query)
    base_query = {k: v for k, v in (("status", query.filters.status), ("queue", query.filters.queue),
                                     ("job_type", query.filters.job_type)) if v}
    if query.limit != 50:
        base_query["limit"] = str(query.limit)
    return dash.render(
        request, "jobs.html", "dead" if query.filters.status is JobStatus.DEAD else "jobs",
        query=query, page=page, base_query=base_query, statuses=list(JobStatus),
        done=DONE.get(params.get("done", "")),
    )


async def _find(request: Request, dash: Dashboard, text: str) -> Response:
    if not text:
        raise BadParameter("find", "give a job id or an idempotency key")
    job = await run_in_threadpool(dash.reader.find, text)
    if job is None:
        return dash.render(request, "error.html", "jobs", status_code=404, title="Not found",
                           message=f"No job has the id or idempotency key {text[:255]!r}.")
    return RedirectResponse(f"{dash.base(request)}/jobs/{job.id}", status_code=303)


async def job_detail(request: Request) -> Response:
    dash = dashboard_of(request)
    job_id = positive_id(request.path_params["job_id"], "job_id")
    job = await run_in_threadpool(dash.reader.job, job_id)
    explanation = await run_in_threadpool(dash.app.explain, job_id)
    return dash.render(
        request, "job.html", "jobs",
        job=job, payload=_pretty(job.payload_json), verdict=explanation.verdict,
        can_retry=job.status in RETRYABLE_STATUSES,
        can_cancel=job.status in CANCELLABLE_STATUSES and job.cancel_requested_at is None,
        done=DONE.get(request.query_params.get("done", "")), history_limit=HISTORY_LIMIT,
        after_retry=after_retry(job.history),
    )


def _pretty(payload_json: str) -> str:
    try:
        return json.dumps(json.loads(payload_json), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return payload_json


async def queues(request: Request) -> Response:
    dash = dashboard_of(request)
    snapshot = await dash.feed.current()
    states = {} if dash.queue_states is None else {s.name: s for s in await run_in_threadpool(dash.queue_states)}
    listed = {q.queue for q in snapshot.queues}
    # without live jobs: the controlled queues, and the default queue, so it can be paused ahead
    idle = [(name, states.get(name)) for name in sorted((set(states) | {DEFAULT_QUEUE}) - listed)]
    return dash.render(request, "queues.html", "queues", snapshot=snapshot, pausing=dash.queue_control is not None,
                       controls=states, controls_known=dash.queue_states is not None, idle=idle,
                       done=DONE.get(request.query_params.get("done", "")))


async def workers(request: Request) -> Response:
    dash = dashboard_of(request)
    entries = await run_in_threadpool(dash.reader.workers)
    return dash.render(request, "workers.html", "workers", workers=entries)


async def schedules(request: Request) -> Response:
    dash = dashboard_of(request)
    entries = await run_in_threadpool(dash.app.schedules) if dash.app.schedule_store is not None else None
    return dash.render(request, "schedules.html", "schedules", schedules=entries)


async def purge_form(request: Request) -> Response:
    dash = dashboard_of(request)
    return dash.render(request, "purge.html", "dead", done=DONE.get(request.query_params.get("done", "")))


#: The files under /static: the stylesheet and the one script (nothing else in the folder is served).
ASSETS = {
    "dashboard.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8", "favicon.svg": "image/svg+xml",
}


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        raise HTTPException(404, "Not found")
    return FileResponse(HERE / "static" / name, media_type=ASSETS[name])


async def events(request: Request) -> Response:
    dash = dashboard_of(request)
    return StreamingResponse(
        dash.feed.events(request.is_disconnected),
        media_type="text/event-stream",
        headers={"x-accel-buffering": "no"},
    )


__all__ = ["ASSETS", "DONE", "asset", "events", "job_detail", "jobs", "overview", "purge_form", "queues", "schedules", "workers"]
