"""The clock port: where "now" comes from."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Supplies the current instant. Tests inject a fake one."""

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...
