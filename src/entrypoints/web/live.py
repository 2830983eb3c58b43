"""Live updates: one snapshot of the store per interval, fanned out to every open page as server-sent events.

However many pages are open, the store is read once per interval: a single ticker task computes
the snapshot (in a worker thread) and puts it in each subscriber's one-slot mailbox, replacing an
unread one, so a slow client never makes the others wait or the ticker queue up.  The ticker runs
only while someone listens.  A page is rendered from the latest snapshot: while it is fresh as it
is, and once it is stale as it is too while a new one is taken in the background (only the very
first page waits for one), so no page waits for the store's counts.  On a store where a snapshot takes long, the period stretches to :data:`COST_FACTOR` times
the last snapshot's duration, so the dashboard keeps the store busy a tenth of the time at most.
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
#: The period is at least this many times the last snapshot's duration.
COST_FACTOR = 10.0
#: Seconds between keep-alive comments on an idle stream.
KEEPALIVE = 15.0


class LiveFeed:
    """The shared snapshot and its subscribers (one per open ``/events`` stream)."""

    def __init__(self, compute: Callable[[], Snapshot], *, interval: float = DEFAULT_INTERVAL) -> None:
        self.compute = compute
        self.interval = interval
        self.computed = 0  # snapshots taken, for tests and the log
        self.last_cost = 0.0  # seconds the last snapshot took
        self._latest: tuple[float, Snapshot] | None = None
        self._mailboxes: set[asyncio.Queue[Snapshot]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[Snapshot] | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def period(self) -> float:
        """Seconds a snapshot is reused: the interval, or :data:`COST_FACTOR` times the last
        snapshot's duration when that is longer."""
        return max(self.interval, COST_FACTOR * self.last_cost)

    async def current(self) -> Snapshot:
        """The latest snapshot; when it is older than :attr:`period` a new one is started in the
        background (and awaited only when there is none yet)."""
        if self._latest is not None:
            if time.monotonic() - self._latest[0] >= self.period and (self._refresh is None or self._refresh.done()):
                self._refresh = asyncio.create_task(self._refreshed())
            return self._latest[1]
        return await self._refreshed()

    async def _refreshed(self) -> Snapshot:
        """The latest snapshot if younger than :attr:`period`, else a new one (one at a time)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._latest is not None and time.monotonic() - self._latest[0] < self.period:
                return self._latest[1]
            started = time.monotonic()
            snapshot = await run_in_threadpool(self.compute)
            self.last_cost = time.monotonic() - started
            self.computed += 1
            self._latest = (time.monotonic(), snapshot)
            return snapshot

    async def _tick(self) -> None:
        while self._mailboxes:
            try:
                snapshot = await self._refreshed()
            except Exception:  # the store may be down for a while: keep the streams, try again
                logger.warning("dashboard: the live snapshot failed; trying again", exc_info=True)
            else:
                for mailbox in list(self._mailboxes):
                    if mailbox.full():
                        mailbox.get_nowait()
                    mailbox.put_nowait(snapshot)
            await asyncio.sleep(self.period)
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
