"""What one job of a bulk enqueue asks for: :class:`EnqueueRequest` (shared by the sync and async API)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs


@attrs.frozen(hash=False)
class EnqueueRequest:
    """One job for :meth:`Tether.enqueue_many`; the fields mean what :meth:`Tether.enqueue`'s
    arguments mean (None picks the handler's or the app's default)."""

    job_type: str
    payload: Any = None
    queue: str | None = None
    priority: int = 0
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    concurrency_key: str | None = None


__all__ = ["EnqueueRequest"]
