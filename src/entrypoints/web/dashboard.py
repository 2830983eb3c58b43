"""The dashboard's state shared by its pages and actions: the app, its reader, the live feed, the
templates and the switches, the registry ``/metrics`` serves; and the seam where queue pausing
plugs in once the app offers it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates
from tether.entrypoints.durations import format_duration
from tether.entrypoints.service import Tether
from tether.entrypoints.web.live import LiveFeed
from tether.entrypoints.web.security import CSRF_FIELD
from tether.entrypoints.web.snapshot import StoreReader

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

HERE = Path(__file__).parent
NAV = (
    ("overview", "", "Overview"),
    ("jobs", "/jobs", "Jobs"),
    ("dead", "/jobs?status=dead", "Dead letters"),
    ("queues", "/queues", "Queues"),
    ("workers", "/workers", "Workers"),
    ("schedules", "/schedules", "Schedules"),
)


def short_time(moment: datetime | None) -> str:
    """``2026-01-31 12:00:05 UTC``; an em dash for None."""
    return "—" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescape on for .html
    templates.env.filters["when"] = short_time
    templates.env.filters["seconds"] = format_duration
    return templates


@attrs.define
class Dashboard:
    """Everything a request handler needs (``request.app.state.dashboard``).

    Attributes:
        queue_control: ``(pause, resume)`` callables taking a queue name, when the app can pause
            queues (``app.pause_queue`` / ``app.resume_queue``); None: the queue actions answer 501.
        queue_states: reads the stored queue controls (the store's ``queue_states``: a list of
            :class:`~tether.domain.queues.QueueState`), shown on the queues page; None: not shown.
        metrics: the registry of the store-wide queue gauges ``/metrics`` serves; None when
            prometheus-client is not installed (``/metrics`` answers 404 saying so).
    """

    app: Tether
    reader: StoreReader
    feed: LiveFeed
    templates: Jinja2Templates
    read_only: bool
    queue_control: tuple[Callable[[str], Any], Callable[[str], Any]] | None = None
    queue_states: Callable[[], list[Any]] | None = None
    metrics: CollectorRegistry | None = None

    @staticmethod
    def base(request: Request) -> str:
        """The path the dashboard is mounted at ('' at the root)."""
        return str(request.scope.get("root_path", "")).rstrip("/")

    def render(self, request: Request, template: str, active: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
        """``template`` with the shared context: base path, navigation, user, CSRF token, read-only."""
        base = self.base(request)
        return self.templates.TemplateResponse(
            request,
            template,
            {
                "base": base,
                "nav": [(key, base + (path or "/"), label) for key, path, label in NAV],
                "active": active,
                "user": request.scope.get("tether.user", ""),
                "csrf_field": CSRF_FIELD,
                "csrf": request.scope.get("tether.csrf", ""),
                "read_only": self.read_only,
                **context,
            },
            status_code=status_code,
        )


def dashboard_of(request: Request) -> Dashboard:
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard


def seams_of(app: Tether) -> dict[str, Any]:
    """The optional features ``app`` offers, as :class:`Dashboard` takes them."""
    pause, resume = getattr(app, "pause_queue", None), getattr(app, "resume_queue", None)
    states = getattr(app.repository, "queue_states", None)
    return {
        "queue_control": (pause, resume) if callable(pause) and callable(resume) else None,
        "queue_states": states if callable(states) else None,
    }


__all__ = ["Dashboard", "dashboard_of", "make_templates", "seams_of", "short_time"]
