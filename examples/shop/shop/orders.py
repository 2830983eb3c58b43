"""Orders: placing one records it and queues its confirmation e-mail."""

from __future__ import annotations

from dataclasses import dataclass, field

import tether

CONFIRMATION = "emails.order_confirmation"


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int
    unit_price_cents: int


@dataclass(frozen=True)
class Order:
    id: int
    email: str | None  # None for orders taken by phone: no e-mail to send
    lines: list[Line] = field(default_factory=list)

    @property
    def total_cents(self) -> int:
        return sum(line.quantity * line.unit_price_cents for line in self.lines)


def place_order(app: tether.Tether, order: Order) -> None:
    """Accept ``order`` and queue its confirmation e-mail (once per order, however often this
    is called for it: the idempotency key is the order id)."""
    if not order.lines:
        raise ValueError(f"order {order.id} has no lines")
    if order.email is None:
        return
    app.enqueue(
        CONFIRMATION,
        {"order_id": order.id, "to": order.email, "total_cents": order.total_cents},
        idempotency_key=f"order-confirmation-{order.id}",
    )
