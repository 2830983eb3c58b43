"""The e-mail job handlers and the mailer they send through."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import tether

from shop.orders import CONFIRMATION


class Mailer(Protocol):
    def send(self, to: str, subject: str, body: str) -> None: ...


@dataclass
class Outbox:
    """A mailer that keeps what it sends (development and tests)."""

    sent: list[tuple[str, str, str]] = field(default_factory=list)

    def send(self, to: str, subject: str, body: str) -> None:
        self.sent.append((to, subject, body))


def register_handlers(app: tether.Tether, mailer: Mailer) -> None:
    """Register the e-mail handlers of the shop on ``app``."""

    @app.handler(CONFIRMATION, max_attempts=5)
    def send_order_confirmation(payload: dict[str, Any]) -> None:
        to = payload["to"]
        if "@" not in to:
            raise tether.PermanentError(f"not an e-mail address: {to!r}")  # retrying cannot help
        euros, cents = divmod(payload["total_cents"], 100)
        mailer.send(to, f"Your order #{payload['order_id']}", f"Thank you! Total: {euros}.{cents:02d} EUR")
