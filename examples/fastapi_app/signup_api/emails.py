"""The welcome e-mail: the job's handler (``async def``: it awaits the mail service) and the mailer it uses."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import tether

WELCOME = "emails.welcome"


class Mailer(Protocol):
    async def send(self, to: str, subject: str, body: str) -> None: ...


class Outbox:
    """A mailer that keeps what it sent (the tests read it; production would call a mail API)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    async def send(self, to: str, subject: str, body: str) -> None:
        await asyncio.sleep(0)  # where a real mailer awaits its HTTP call
        self.sent.append((to, subject, body))


def register_handlers(app: tether.Tether, mailer: Mailer) -> None:
    @app.handler(WELCOME, timeout=30)
    async def send_welcome(payload: dict[str, Any], ctx: tether.JobContext) -> None:
        await mailer.send(payload["to"], "Welcome!", f"Hello {payload['name']}, thanks for signing up.")
