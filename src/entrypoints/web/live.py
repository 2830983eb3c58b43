"""Live updates: one snapshot of the store per interval, fanned out to every open page as server-sent events.

However many pages are open, the store is read once per interval: a single ticker task computes
the snapshot (in a worker thread) and puts it in each subscriber's one-slot mailbox, replacing an
unread one, so a slow client never makes the others wait or the ticker queue up.  The ticker runs
only while someone listens.  Pages rendered in between reuse the latest snapshot while it is
fresh.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable

from starlette.concurrency import run_in_threadpool
from tether.entrypoints.web.snapshot import Snapshot

logger = logging.getLogger("tether.web")

#: Seconds between two snapshots while pages listen.
DEFAULT_INTERVAL = 2.0
#: Seconds between keep-alive comments on an idle stream.
KEEPALIVE = 15.0


class LiveFeed:
    """The shared snapshot and its subscribers (one per open ``/events`` stream)."""

    def __init__(self, compute: Callable[[], Snapshot], *, interval: float = DEFAULT_INTERVAL) -> None:
        self.compute = compute
        self.interval = interval
        self.computed = 0  # snapshots taken, for tests and the log
        self._latest: tuple[float, Snapshot] | None = None
        self._mailboxes: set[asyncio.Queue[Snapshot]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None

    async def current(self) -> Snapshot:
        """The latest snapshot if younger than the interval, else a new one (one at a time)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._latest is not None and time.monotonic() - self._latest[0] < self.interval:
                return self._latest[1]
            snapshot = await run_in_threadpool(self.compute)
            self.computed += 1
            self._latest = (time.monotonic(), snapshot)
            return snapshot

    async def _tick(self) -> None:
        while self._mailboxes:
            try:
                snapshot = await self.current()
            except Exception:  # the store may be down for a while: keep the streams, try again
                logger.warning("dashboard: the live snapshot failed; trying again", exc_info=True)
            else:
                for mailbox in list(self._mailboxes):
                    if mailbox.full():
                        mailbox.get_nowait()
                    mailbox.put_nowait(snapshot)
            await asyncio.sleep(self.interval)
        self._ticker = None

    async def events(self, is_disconnected: Callable[[], object]) -> AsyncIterator[str]:
        """Server-sent events for one client until it goes away: ``event: snapshot`` with the
        snapshot's JSON (:meth:`Snapshot.as_json`) at each tick."""
        mailbox: asyncio.Queue[Snapshot] = asyncio.Queue(maxsize=1)
        self._mailboxes.add(mailbox)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick())
        try:
            yield "retry: 5000\n\n"
            quiet = 0.0
            while True:
                try:
                    snapshot = await asyncio.wait_for(mailbox.get(), timeout=min(self.interval, KEEPALIVE))
                except TimeoutError:
                    quiet += min(self.interval, KEEPALIVE)
                    if await is_disconnected():  # type: ignore[misc]
                        return
                    if quiet >= KEEPALIVE:
                        quiet = 0.0
                        yield ": keep-alive\n\n"
                    continue
                quiet = 0.0
                yield f"event: snapshot\ndata: {json.dumps(snapshot.as_json(), separators=(',', ':'))}\n\n"
        finally:
            self._mailboxes.discard(mailbox)


__all__ = ["DEFAULT_INTERVAL", "LiveFeed"]
