"""Live updates: one snapshot per interval however many pages listen, and the /events stream's frames;
the SVG chart and the snapshot's figures."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from tether.domain.job import JobStatus
from tether.domain.overview import FinishedMinute, StatusTotals, Throughput
from tether.entrypoints.web.chart import throughput_svg
from tether.entrypoints.web.live import LiveFeed
from tether.entrypoints.web.snapshot import Snapshot

from tests.web_support import client, new_app

NOW = datetime(2026, 1, 1, 12, 30, 15, tzinfo=UTC)


def snapshot(queued: int = 1) -> Snapshot:
    counts = {s: 0 for s in JobStatus}
    counts[JobStatus.QUEUED] = queued
    return Snapshot(NOW, StatusTotals(counts))


def test_one_snapshot_per_interval_is_fanned_out_to_every_listener() -> None:
    taken: list[int] = []

    def compute() -> Snapshot:
        taken.append(1)
        return snapshot(len(taken))

    feed = LiveFeed(compute, interval=0.05)

    async def listen(received: list[dict[str, object]]) -> None:
        stream = feed.events(lambda: asyncio.sleep(0, result=False))
        async for frame in stream:
            if frame.startswith("event: snapshot"):
                received.append(json.loads(frame.split("data: ", 1)[1]))
                if len(received) == 4:
                    await stream.aclose()
                    return

    async def main() -> list[list[dict[str, object]]]:
        inboxes: list[list[dict[str, object]]] = [[] for _ in range(5)]
        await asyncio.wait_for(asyncio.gather(*(listen(box) for box in inboxes)), timeout=60)
        return inboxes

    inboxes = asyncio.run(main())
    assert all(len(box) == 4 for box in inboxes)
    # five listeners, four events each, from about four snapshots: never one per listener
    assert len(taken) <= 6, len(taken)
    assert all(box[0]["figures"]["status.queued"] in (1, 2) for box in inboxes)  # type: ignore[index]


def test_a_page_in_between_reuses_the_fresh_snapshot() -> None:
    taken: list[int] = []
    feed = LiveFeed(lambda: taken.append(1) or snapshot(), interval=60)

    async def main() -> None:
        for _ in range(3):
            await feed.current()

    asyncio.run(main())
    assert len(taken) == 1


def test_the_events_stream_sends_the_figures_the_page_shows() -> None:
    app = new_app()
    for _ in range(2):
        app.enqueue("mail.send", {}, queue="mail")
    c = client(app, live_interval=0.05)
    with c.stream("GET", "/events") as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                data = json.loads(line[len("data: "):])
                break
    assert data["figures"]["status.queued"] == 2 and data["figures"]["queue.mail.queued"] == 2
    assert data["figures"]["workers.alive"] == 0


def test_the_chart_stacks_completed_and_dead_per_minute_and_says_when_capped() -> None:
    minute = NOW.replace(second=0) - timedelta(minutes=2)
    chart = str(throughput_svg(Throughput((FinishedMinute(minute, completed=8, dead=2),), capped=True), NOW))
    assert chart.count('<rect class="completed"') == 1 and chart.count('<rect class="dead"') == 1
    assert "12:28 UTC: 8 completed" in chart and "12:28 UTC: 2 dead" in chart
    assert ">10<" in chart  # the scale's top
    assert "fewer" in chart
    assert "rect" not in str(throughput_svg(Throughput(()), NOW))


def test_a_slow_snapshot_stretches_the_period_to_ten_times_its_duration() -> None:
    def slow() -> Snapshot:
        import time

        time.sleep(0.05)
        return snapshot()

    feed = LiveFeed(slow, interval=0.01)

    async def main() -> None:
        await feed.current()
        await feed.current()  # within 10 x 0.05 s: reused

    asyncio.run(main())
    assert feed.computed == 1 and feed.period >= 0.5


def test_a_stale_snapshot_is_served_while_a_new_one_is_taken() -> None:
    taken: list[int] = []

    def compute() -> Snapshot:
        taken.append(1)
        return snapshot(len(taken))

    feed = LiveFeed(compute, interval=60)

    async def main() -> list[int]:
        first = await feed.current()
        assert feed._latest is not None
        feed._latest = (feed._latest[0] - 120, feed._latest[1])  # two periods old
        stale = await feed.current()  # served at once, a refresh started
        assert feed._refresh is not None
        await feed._refresh
        fresh = await feed.current()
        return [first.totals.counts[JobStatus.QUEUED], stale.totals.counts[JobStatus.QUEUED], fresh.totals.counts[JobStatus.QUEUED]]

    assert asyncio.run(main()) == [1, 1, 2]
